"""A second-stage reranker behind an OpenAI-compatible ``POST {base_url}/rerank`` endpoint.

The request and answer are the ones SiliconFlow, Jina and Cohere share:
``{model, query, documents, top_n}`` -> ``{"results": [{"index", "relevance_score"}, …]}``
(for example ``BAAI/bge-reranker-v2-m3``). Off unless ``RERANK_MODEL`` is set. The call goes
through ``OpenAIEndpoint`` (retries, ``Retry-After``, deadline, circuit breaker).
"""

from __future__ import annotations

from collections.abc import Sequence

from ..errors import RerankError
from ..lang.text import scrub
from ..settings import MemorySettings
from .openai_api import OpenAIEndpoint, open_http_client

# A reranker reads each document with the query in one window (bge-reranker: 512 tokens by
# default); a chat turn longer than this adds nothing to its relevance but time.
RERANK_MAX_CHARS = 1024
# One retry at most: the reranker has a deadline well inside a reply's, and without it the
# recall keeps its own order.
RERANK_MAX_RETRIES = 1


class ApiReranker:
    """Orders documents by relevance to a query; owns its endpoint (``aclose``)."""

    def __init__(self, endpoint: OpenAIEndpoint, *, model: str, deadline: float) -> None:
        self.model = model
        self._endpoint = endpoint
        self._deadline = deadline

    async def scored(self, query: str, documents: Sequence[str]) -> list[tuple[int, float | None]]:
        """Indices of ``documents``, most relevant first, every index once, each with its
        relevance score (``None``: the answer left it out; it keeps its place after the
        ranked ones).

        Raises ``RerankError`` when the endpoint fails, misses its deadline or answers with
        something that is not a ranking of these documents."""
        if not documents:
            return []
        body = {
            "model": self.model,
            "query": scrub(query[:RERANK_MAX_CHARS]) or " ",
            "documents": [scrub(d[:RERANK_MAX_CHARS]) or " " for d in documents],
            "top_n": len(documents),
            "return_documents": False,
        }
        response = await self._endpoint.post("rerank", body, deadline=self._deadline)
        try:
            results = response.json()["results"]
            scored = [(int(r["index"]), float(r["relevance_score"])) for r in results]
        except (ValueError, KeyError, TypeError) as exc:
            raise RerankError(
                f"reranker answered with an unreadable body: {exc!r}: "
                f"{self._endpoint.excerpt(response.text)}"
            ) from exc
        # Only indices of the documents sent count, each once: an answer can never bring in
        # anything that was not a candidate.
        ranked: dict[int, float | None] = {}
        for index, score in sorted(scored, key=lambda pair: -pair[1]):
            if 0 <= index < len(documents) and index not in ranked:
                ranked[index] = score
        if not ranked:
            raise RerankError("reranker returned no result for the documents sent")
        # Documents the answer left out keep their place after the ranked ones.
        left_out = [(i, None) for i in range(len(documents)) if i not in ranked]
        return list(ranked.items()) + left_out

    async def aclose(self) -> None:
        await self._endpoint.aclose()


def build_reranker(settings: MemorySettings) -> ApiReranker | None:
    """The configured reranker, or ``None`` when ``RERANK_MODEL`` is empty (the default)."""
    endpoint = settings.rerank_endpoint
    if not endpoint.configured:
        return None
    client = open_http_client(
        base_url=endpoint.base_url,
        api_key=endpoint.api_key,
        timeout=endpoint.timeout,
        setting_prefix=endpoint.setting_prefix,
        max_connections=8,
    )
    return ApiReranker(
        OpenAIEndpoint(
            client,
            label="reranker",
            error=RerankError,
            max_retries=RERANK_MAX_RETRIES,
            max_delay=1.0,
        ),
        model=endpoint.model,
        deadline=settings.rerank_deadline,
    )
