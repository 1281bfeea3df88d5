"""The console's routes: a small Starlette app mounted at ``/memory`` on NoneBot's FastAPI app.

Every route but the login form and the style sheet needs a logged-in session (else 401 with the
login form); every POST needs that session's CSRF token (else 403); a request a browser marks
as cross-site is refused (403) before anything else. A handler turns the request into one call
of ``memory_core.console`` and a page.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from datetime import date, datetime, time, timedelta, timezone
from pathlib import Path
from time import monotonic as time_now
from urllib.parse import parse_qs, urlencode

from nonebot import get_driver
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import HTMLResponse, PlainTextResponse, RedirectResponse, Response
from starlette.routing import Route

from memory_core import EmbeddingError, InvalidTurnError, MemoryCoreError, is_failing, time_problem
from memory_core.console import (
    RANGE_TEXT,
    ConsoleConflictError,
    DailyFigures,
    MemoryConsole,
    TurnPage,
    TurnSearch,
    connection_of,
    documented,
    masked_settings,
    settings_sections,
    trace_recall,
)

from ..runtime import Runtime, RuntimeNotReady, get_runtime
from . import admin_views, log_views, memory_views, views
from .access import COOKIE, ConsoleAccess, ConsoleSession, client_of, cross_site
from .markup import Markup
from .qq_names import connected_accounts, group_titles, qq_names

log = logging.getLogger("nonebot_plugin_temporal_memory.console")

STYLE = (Path(__file__).with_name("style.css")).read_text(encoding="utf-8")
MAX_FORM_BYTES = 256 * 1024
FIGURES_TTL = 60.0  # seconds the overview's charts are reused
SECURITY_HEADERS = {
    "Content-Security-Policy": (
        "default-src 'none'; style-src 'self'; img-src 'self' data:; form-action 'self'; "
        "frame-ancestors 'none'; base-uri 'none'"
    ),
    "X-Frame-Options": "DENY",
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "same-origin",  # "no-referrer" makes Chrome send Origin: null
    "Cache-Control": "no-store",
}
BAD_REQUEST = "请求格式不对"
DATABASE_DOWN = "记忆数据库暂时连不上，请稍后再试。"

Handler = Callable[[Request, "Context"], Awaitable[Response]]


class Context:
    """What a handler gets: the runtime, the console over its memory, the login session."""

    def __init__(self, runtime: Runtime, session: ConsoleSession, request: Request) -> None:
        self.runtime = runtime
        self.console = MemoryConsole.from_parts(runtime.memory.parts, names=qq_names)
        self.session = session
        self.actor = f"控制台@{client_of(request)}"
        self.page = views.Page(tz=runtime.settings.tz, csrf=session.csrf)

    def with_message(self, *, notice: str = "", error: str = "") -> views.Page:
        return views.Page(tz=self.page.tz, csrf=self.page.csrf, notice=notice, error=error)


def env_file_text() -> str:
    """The commented settings file NoneBot read at start-up (``.env.{ENVIRONMENT}`` in the
    directory the bot runs in): the settings page's sections and descriptions. Empty when
    there is none (a project that sets everything in its environment)."""
    path = Path.cwd() / f".env.{get_driver().env}"
    try:
        return path.read_text(encoding="utf-8")
    except OSError:
        return ""


def html(page: Markup, status: int = 200) -> HTMLResponse:
    return HTMLResponse(str(page), status_code=status, headers=SECURITY_HEADERS)


def refused(text: str, status: int) -> PlainTextResponse:
    return PlainTextResponse(text, status_code=status, headers=SECURITY_HEADERS)


async def form_of(request: Request) -> dict[str, str]:
    """An urlencoded form's fields (the first value of each); python-multipart is not needed."""
    body = await request.body()
    if len(body) > MAX_FORM_BYTES:
        raise ValueError("form too large")
    fields = parse_qs(body.decode("utf-8", errors="replace"), keep_blank_values=True)
    return {key: values[0] for key, values in fields.items()}


def _int(text: str | None) -> int | None:
    text = (text or "").strip()
    if not text:
        return None
    value = int(text)
    if not -(2**63) <= value < 2**63:
        raise ValueError("out of range")
    return value


def _group_switch_form(request: Request) -> tuple[int, bool]:
    """The group and the wanted state of a settings-page switch (``ValueError`` if no group)."""
    form = request.state.form
    group_id = _int(form["group"])
    if group_id is None or group_id <= 0:
        raise ValueError("group")
    return group_id, form.get("on") == "1"


class BadParameter(ValueError):
    """A request parameter out of its range: answered 400 with this message (in Chinese)."""


MAX_PAGE = 100_000
"""The last page number a console list accepts (far past any real list, far from 2^63)."""


def _page(text: str | None) -> int:
    number = max(_int(text) or 0, 0)
    if number > MAX_PAGE:
        raise BadParameter(f"页码 {number} 太大（最大 {MAX_PAGE}）")
    return number


def _in_range(moment: datetime, shown: str) -> datetime:
    if time_problem(moment) is not None:
        raise BadParameter(f"时间 {shown[:40]} 超出范围（{RANGE_TEXT}）")
    return moment


def _day(text: str | None, tz: timezone | object, *, next_day: bool = False) -> datetime | None:
    text = (text or "").strip()
    if not text:
        return None
    day = date.fromisoformat(text)
    moment = datetime.combine(day, time.min, tz)  # type: ignore[arg-type]
    _in_range(moment, text)
    return moment + timedelta(days=1) if next_day else moment


def back_to(path: str, **query: object) -> RedirectResponse:
    target = f"{views.BASE}{path}"
    if query:
        target += "?" + urlencode({k: str(v) for k, v in query.items()})
    return RedirectResponse(target, status_code=303, headers=SECURITY_HEADERS)


class ConsoleApp:
    """The routes, bound to one ``ConsoleAccess``."""

    def __init__(self, access: ConsoleAccess) -> None:
        self.access = access
        self._figures: tuple[float, DailyFigures] | None = None

    def app(self) -> Starlette:
        guarded: list[tuple[str, Handler, str]] = [
            ("/", self.overview, "GET"),
            ("/sessions", self.sessions, "GET"),
            ("/session", self.session, "GET"),
            ("/bin", self.recycle_bin, "GET"),
            ("/audit", self.audit, "GET"),
            ("/debug", self.debug, "GET"),
            ("/debug", self.debug, "POST"),
            ("/settings", self.settings, "GET"),
            ("/turn/edit", self.edit_turn, "POST"),
            ("/memory/edit", self.edit_memory, "POST"),
            ("/delete", self.delete, "POST"),
            ("/delete-selected", self.delete_selected, "POST"),
            ("/pin", self.pin, "POST"),
            ("/bin/restore", self.restore, "POST"),
            ("/group-switch", self.group_switch, "POST"),
            ("/group-sharing", self.group_sharing, "POST"),
            ("/logout", self.logout, "POST"),
        ]
        routes = [
            Route("/login", self.login_form, methods=["GET"]),
            Route("/login", self.login, methods=["POST"]),
            Route("/style.css", self.style, methods=["GET"]),
            *(
                Route(path, self.guard(handler), methods=[method])
                for path, handler, method in guarded
            ),
        ]
        return Starlette(routes=routes)

    def guard(self, handler: Handler) -> Callable[[Request], Awaitable[Response]]:
        async def guarded(request: Request) -> Response:
            if cross_site(request):
                return refused("跨站请求被拒绝", 403)
            session = self.access.session_of(request)
            if session is None:
                if request.method == "GET":
                    return html(views.login_page("请先登录。"), 401)
                return refused("未登录", 401)
            try:
                runtime = get_runtime()
            except RuntimeNotReady:
                return refused("机器人还没有启动完成", 503)
            if request.method == "POST":
                try:
                    form = await form_of(request)
                except ValueError:
                    return refused(BAD_REQUEST, 400)
                if not self.access.csrf_matches(session, form.get("csrf", "")):
                    return refused("CSRF 校验失败，请刷新页面后重试", 403)
                request.state.form = form
            context = Context(runtime, session, request)
            try:
                return await handler(request, context)
            except BadParameter as exc:
                return refused(str(exc), 400)
            except (ValueError, KeyError):
                return refused(BAD_REQUEST, 400)
            except MemoryCoreError as exc:
                log.warning("console request %s failed: %s", request.url.path, exc)
                return html(
                    views.layout(
                        context.with_message(error=DATABASE_DOWN), "", "出错了", Markup("")
                    ),
                    503,
                )

        return guarded

    # ------------------------------------------------------------------ login

    async def style(self, request: Request) -> Response:
        return Response(STYLE, media_type="text/css", headers={"Cache-Control": "max-age=3600"})

    async def login_form(self, request: Request) -> Response:
        if cross_site(request):
            return refused("跨站请求被拒绝", 403)
        return html(views.login_page())

    async def login(self, request: Request) -> Response:
        if cross_site(request):
            return refused("跨站请求被拒绝", 403)
        client = client_of(request)
        if self.access.limiter.blocked(client):
            return html(views.login_page("尝试次数过多，请几分钟后再试。"), 429)
        try:
            form = await form_of(request)
        except ValueError:
            return refused(BAD_REQUEST, 400)
        if not self.access.token_matches(form.get("token", "")):
            self.access.limiter.failed(client)
            log.warning("console login refused from %s", client)
            return html(views.login_page("令牌不对。"), 401)
        sid, _ = self.access.open_session()
        response = back_to("/")
        response.set_cookie(
            COOKIE,
            sid,
            httponly=True,
            samesite="strict",
            secure=request.url.scheme == "https",
            path=views.BASE,
        )
        log.info("console login from %s", client)
        return response

    async def logout(self, request: Request, ctx: Context) -> Response:
        self.access.close_session(request)
        response = RedirectResponse(
            f"{views.BASE}/login", status_code=303, headers=SECURITY_HEADERS
        )
        response.delete_cookie(COOKIE, path=views.BASE)
        return response

    # ------------------------------------------------------------------ pages

    async def overview(self, request: Request, ctx: Context) -> Response:
        # Daily figures change slowly and cost a scan of the month's turns: kept a minute
        # (today's message count in the headline comes from them too).
        now = time_now()
        if self._figures is None or now - self._figures[0] > FIGURES_TTL:
            self._figures = (now, await ctx.console.daily_figures())
        figures = self._figures[1]
        runtime = ctx.runtime
        retention = runtime.memory.parts.retention
        bands = retention.band_names if retention else ()
        bin_size = await ctx.console.recycle_bin_size()
        status = admin_views.BotStatus(
            accounts=connected_accounts(),
            connection=connection_of(
                runtime.memory.parts,
                chat_model=runtime.settings.llm_model if runtime.chat_model else None,
            ),
            started_at=runtime.started_at,
            now=datetime.now(timezone.utc),
            chat_failing=is_failing(runtime.chat_model),
        )
        headline = await ctx.console.headline(figures)
        return html(admin_views.overview_page(ctx.page, headline, status, figures, bands, bin_size))

    async def sessions(self, request: Request, ctx: Context) -> Response:
        q = request.query_params
        chat_type = q.get("type", "")
        if chat_type not in ("", "private", "group"):
            raise ValueError("type")
        number = _page(q.get("page"))
        rows = await ctx.console.sessions(
            chat_type=chat_type or None,
            group_id=_int(q.get("group")),
            user_id=_int(q.get("user")),
            page=number,
        )
        return html(
            memory_views.sessions_page(
                ctx.page,
                rows,
                chat_type=chat_type,
                group=q.get("group", ""),
                user=q.get("user", ""),
                number=number,
            )
        )

    async def session(
        self, request: Request, ctx: Context, *, notice: str = "", error: str = ""
    ) -> Response:
        q = request.query_params
        key = q.get("key", "")
        row = await ctx.console.session(key)
        if row is None:
            return html(
                views.layout(
                    ctx.with_message(error="没有这个会话（或它已没有任何对话）。"),
                    "sessions",
                    "会话",
                    Markup(""),
                ),
                404,
            )
        tz = ctx.page.tz
        search = TurnSearch(
            text=q.get("q", ""),
            by_meaning=q.get("mode") == "meaning",
            start=_day(q.get("from"), tz),
            end=_day(q.get("to"), tz, next_day=True),
            page=_page(q.get("page")),
        )
        page = ctx.with_message(notice=q.get("notice", "")[:200], error=error)
        try:
            found = await ctx.console.search_turns(key, search)
        except EmbeddingError:
            found = TurnPage([], None)
            page = ctx.with_message(error="向量服务暂时不可用，语义搜索失败；可改用关键词搜索。")
        shown = await ctx.console.shown_memories(key, search.text if not search.by_meaning else "")
        memories = [m for m, _ in shown]
        sources = {m.id: await ctx.console.sources(key, m) for m in memories}
        return html(
            memory_views.session_page(
                page,
                row,
                search,
                start_text=q.get("from", ""),
                end_text=q.get("to", ""),
                found=found,
                memories=memories,
                sources=sources,
                pinned_memories={m.id for m, pinned in shown if pinned},
                policy=ctx.runtime.memory.parts.retention,
            )
        )

    async def recycle_bin(self, request: Request, ctx: Context) -> Response:
        key = request.query_params.get("key", "")
        items = await ctx.console.recycle_bin(key or None)
        page = ctx.with_message(notice=request.query_params.get("notice", "")[:200])
        names = await ctx.console.chat_names([key, *(b.session_key for b in items)])
        return html(log_views.bin_page(page, items, key, names))

    async def audit(self, request: Request, ctx: Context) -> Response:
        number = _page(request.query_params.get("page"))
        entries = await ctx.console.audit_log(number)
        # Sessions and groups by name, not by key or number.
        names = await ctx.console.chat_names([e.session_key for e in entries if e.session_key])
        switched = [e.target_id for e in entries if e.target_kind == "group" and e.target_id]
        groups = await group_titles(switched)
        return html(log_views.audit_page(ctx.page, entries, number, names, groups))

    async def debug(self, request: Request, ctx: Context) -> Response:
        # The message comes in a POST: a query string would put it in the access log.
        q = request.state.form if request.method == "POST" else request.query_params
        user, group, message, at = (q.get(k, "") for k in ("user", "group", "message", "at"))
        tz = ctx.page.tz
        now = datetime.now(timezone.utc)
        trace = None
        page = ctx.page
        if request.method == "POST" and user.strip() and message.strip():
            when = (
                _in_range(datetime.fromisoformat(at).replace(tzinfo=tz), at) if at.strip() else now
            )
            user_id = _int(user)
            if user_id is None:
                raise ValueError("user")
            group_id = _int(group)
            # The names the bot's prompt would carry, from the same QQ client lookups.
            names = await qq_names(user_id, group_id)
            trace = await trace_recall(
                ctx.runtime.memory.parts,
                user_id=user_id,
                group_id=group_id,
                message=message[:2000],
                now=when,
                sender_name=names.person,
                bot_name=ctx.runtime.bot_name,
                group_name=names.group,
                preparer=ctx.runtime.engine.preparer,
            )
        if not at.strip():
            at = f"{now.astimezone(tz):%Y-%m-%dT%H:%M}"
        named = await ctx.console.chat_names([trace.session_key] if trace else [])
        return html(
            admin_views.debug_page(
                page, user=user, group=group, message=message, at=at, trace=trace, names=named
            )
        )

    async def settings(self, request: Request, ctx: Context) -> Response:
        rt = ctx.runtime
        env_text = env_file_text()
        # NoneBot's own keys of the file (HOST, SUPERUSERS, …) as NoneBot read them.
        nonebot = get_driver().config
        own = {k: getattr(nonebot, k.lower(), None) for k in documented(env_text)[0]}
        rows = masked_settings(rt.settings, rt.config, {k: v for k, v in own.items() if v})
        sections = settings_sections(rows, env_text)
        groups = await ctx.console.group_switches()
        return html(
            admin_views.settings_page(
                ctx.with_message(notice=request.query_params.get("notice", "")[:200]),
                sections,
                groups,
                await group_titles(g.group_id for g in groups),
            )
        )

    # ------------------------------------------------------------------ changes

    async def edit_turn(self, request: Request, ctx: Context) -> Response:
        return await self._edit(request, ctx, ctx.console.edit_turn)

    async def edit_memory(self, request: Request, ctx: Context) -> Response:
        return await self._edit(request, ctx, ctx.console.edit_memory)

    async def _edit(
        self, request: Request, ctx: Context, edit: Callable[..., Awaitable[object]]
    ) -> Response:
        form = request.state.form
        key, item_id = form["key"], _int(form["id"])
        try:
            changed = await edit(key, item_id, form.get("text", ""), actor=ctx.actor)
        except InvalidTurnError:
            return back_to("/session", key=key, notice="内容不能为空，没有保存。")
        except ConsoleConflictError as exc:
            return back_to("/session", key=key, notice=str(exc))
        notice = (
            "已保存，并重新生成了向量。"
            if changed is not None
            else "没有找到这一条（可能已被删除）。"
        )
        return back_to("/session", key=key, notice=notice)

    async def delete(self, request: Request, ctx: Context) -> Response:
        form = request.state.form
        key, item_id = form["key"], _int(form["id"])
        if item_id is None:
            raise ValueError("id")
        binned = await ctx.console.delete(form["kind"], key, item_id, actor=ctx.actor)
        days = ctx.runtime.settings.memory_recycle_days
        notice = (
            f"已移入回收站（保留 {days:g} 天）。" if binned else "没有找到这一条（可能已被删除）。"
        )
        return back_to("/session", key=key, notice=notice)

    async def delete_selected(self, request: Request, ctx: Context) -> Response:
        # Checkboxes named "item" with values "turn:12" / "distilled:3"; several per form.
        body = parse_qs((await request.body()).decode("utf-8", errors="replace"))
        key = request.state.form["key"]
        items = []
        for value in body.get("item", []):
            kind, _, number = value.partition(":")
            item_id = _int(number)
            if kind not in ("turn", "distilled") or item_id is None:
                raise ValueError("item")
            items.append((kind, item_id))
        if not items:
            return back_to("/session", key=key, notice="没有选中任何一条。")
        moved = await ctx.console.delete_many(key, items, actor=ctx.actor)
        days = ctx.runtime.settings.memory_recycle_days
        return back_to(
            "/session", key=key, notice=f"已把 {moved} 条移入回收站（保留 {days:g} 天）。"
        )

    async def pin(self, request: Request, ctx: Context) -> Response:
        form = request.state.form
        key, item_id = form["key"], _int(form["id"])
        if item_id is None:
            raise ValueError("id")
        pinned = form.get("pinned") == "1"
        changed = await ctx.console.pin(form["kind"], key, item_id, pinned=pinned, actor=ctx.actor)
        if not changed:
            notice = "没有找到这一条（可能已被删除）。"
        else:
            notice = "已置顶，这一条不会过期。" if pinned else "已取消置顶。"
        return back_to("/session", key=key, notice=notice)

    async def restore(self, request: Request, ctx: Context) -> Response:
        bin_id = _int(request.state.form["id"])
        if bin_id is None:
            raise ValueError("id")
        try:
            item = await ctx.console.restore(bin_id, actor=ctx.actor)
        except ConsoleConflictError as exc:
            return back_to("/bin", notice=str(exc))
        if item is None:
            return back_to("/bin", notice="回收站里没有这一条。")
        return back_to("/session", key=item.session_key, notice="已恢复。")

    async def group_switch(self, request: Request, ctx: Context) -> Response:
        group_id, on = _group_switch_form(request)
        await ctx.console.switch_group(group_id, on=on, actor=ctx.actor)
        return back_to("/settings", notice=f"群 {group_id} 的记忆已{'打开' if on else '关闭'}。")

    async def group_sharing(self, request: Request, ctx: Context) -> Response:
        group_id, on = _group_switch_form(request)
        await ctx.console.switch_group_sharing(group_id, on=on, actor=ctx.actor)
        state = "群友共享（成员能想起彼此在群里说过的话）" if on else "各人分开"
        return back_to("/settings", notice=f"群 {group_id} 的记忆已改为{state}。")
