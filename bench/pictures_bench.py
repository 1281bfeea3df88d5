"""Pictures remembered (issue 28): CPU per picture read, and a sticker flood through the reader.

`python -m bench.pictures_bench` prints:

* the CPU (of the OCR's worker process, at its lower priority) and the wall time of reading one
  picture with the offline OCR, p50 / p95, for a parcel note (640x220) and a phone-sized chat
  screenshot (1080x1920, 16 lines), the first call (models loaded) apart;
* the OCR worker's memory: its resident size idle (models loaded, one small picture read) and
  its peak (``VmHWM``) reading one picture, a fresh worker per picture: a chat screenshot, a
  6,300 x 6,300 RGBA PNG of text on a transparent ground (~330 KB) and a 6,000 x 4,500 JPEG;
* a flood of stickers in one minute through ``PictureReader`` with the default bounds (20 distinct
  stickers sent 200 times between them, from a loopback server, named by their MD5 as NapCat
  names them), twice, the second time with 20 new stickers: how many were fetched, read and
  left, the queue's high-water mark and the process's resident memory after each minute.
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import io
import os
import time
from pathlib import Path

from PIL import Image, ImageDraw, ImageFont

from bench.common import RandomQueryEmbedder, bench_data_dir, machine_line, percentiles
from bench.process_stats import load_average, process_cpu, rss_mb
from memory_core import TemporalMemory, open_memory
from memory_core.errors import PictureError
from memory_core.models import TurnInput
from memory_core.pictures import PictureReader, PictureRef
from memory_core.pictures.ocr import RapidOcrReader
from memory_core.settings import MemorySettings
from tests.big_pictures import text_on_transparent
from tests.picture_server import FONT, PictureServer, draw_note, note_picture

CHAT_LINES = (
    "小明：周六上午十点在人民公园门口集合",
    "小红：好的，我带水和零食",
    "小明：记得带身份证，下午去博物馆",
    "阿强：博物馆要提前预约吗？",
    "小明：要，我已经约了四个人的票",
    "小红：预约号是 A20261205",
    "阿强：收到，几点结束？",
    "小明：大概下午四点，然后一起吃饭",
    "小红：吃火锅还是烤肉？",
    "阿强：火锅！海底捞人民公园店",
    "小明：那我订晚上六点的位子",
    "小红：订好了发群里",
    "小明：订好了，大桌，电话 13800138000",
    "阿强：👍",
    "小红：周六见",
    "小明：别迟到哦",
)


def chat_screenshot(seed: int) -> bytes:
    font = ImageFont.truetype(str(FONT), 40)
    image = Image.new("RGB", (1080, 1920), (237, 237, 237))
    draw = ImageDraw.Draw(image)
    for i, line in enumerate(CHAT_LINES):
        y = 60 + i * 112
        draw.rounded_rectangle((30, y - 10, 1050, y + 70), radius=16, fill="white")
        draw.text((50, y), line.replace("十点", f"{(seed % 3) + 9}点"), font=font, fill="black")
    out = io.BytesIO()
    image.save(out, "PNG")
    return out.getvalue()


def sticker(seed: int) -> bytes:
    image = Image.new("RGB", (120, 120), (seed * 37 % 255, seed * 91 % 255, 200))
    ImageDraw.Draw(image).ellipse((20, 20, 100, 100), fill="yellow")
    out = io.BytesIO()
    image.save(out, "GIF")
    return out.getvalue()


def read_one(reader: RapidOcrReader, picture: bytes) -> tuple[list[str], float, float]:
    """The lines read, the OCR worker's CPU ms and the wall ms it took."""
    c, w = process_cpu(reader.worker_pid), time.perf_counter()
    lines = asyncio.run(reader.read(picture))
    return lines, (process_cpu(reader.worker_pid) - c) * 1000, (time.perf_counter() - w) * 1000


def measure(reader: RapidOcrReader, pictures: list[bytes]) -> tuple[list[float], list[float]]:
    cpu, wall = [], []
    for picture in pictures:
        _, used, took = read_one(reader, picture)
        cpu.append(used)
        wall.append(took)
    return cpu, wall


def _status_mb(pid: int, key: str) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(key + ":"):
            return int(line.split()[1]) / 1024
    return 0.0


def big_jpeg() -> bytes:
    note = Image.open(io.BytesIO(note_picture())).convert("RGB")
    canvas = Image.new("RGB", (6000, 4500), (250, 248, 240))
    canvas.paste(note.resize((note.width * 5, note.height * 5)), (500, 1800))
    out = io.BytesIO()
    canvas.save(out, "JPEG", quality=85)
    return out.getvalue()


def worker_memory() -> None:
    """Idle and peak resident memory of the OCR worker, a fresh one for each picture."""
    pictures = {
        "chat screenshot 1080x1920": chat_screenshot(0),
        "RGBA 6300x6300 PNG (text on transparent)": text_on_transparent(),
        "RGBA 6300x6300 WebP, lossless (the same)": text_on_transparent(fmt="WEBP"),
        "RGBA 2400x2400 WebP, lossless": text_on_transparent(2400, "WEBP", enlarged=3),
        "JPEG 6000x4500": big_jpeg(),
    }
    for name, picture in pictures.items():
        reader = RapidOcrReader()
        asyncio.run(reader.read(note_picture()))  # the models loaded, one small picture read
        pid = reader.worker_pid or 0
        idle = _status_mb(pid, "VmRSS")
        # The peak from here on: the note's own is not this picture's.
        Path(f"/proc/{pid}/clear_refs").write_text("5")
        cpu = process_cpu(pid)
        try:
            lines = asyncio.run(reader.read(picture))
        except PictureError as exc:
            lines = [f"refused: {exc}"]
        peak = _status_mb(pid, "VmHWM")
        print(
            f"OCR worker, {name} ({len(picture) // 1000} KB): idle {idle:.0f} MB, "
            f"peak {peak:.0f} MB ({peak / idle:.2f} x idle), "
            f"after {_status_mb(pid, 'VmRSS'):.0f} MB; CPU {process_cpu(pid) - cpu:.2f} s; "
            f"{len(lines)} line(s), first {lines[:1]} (load {load_average()})"
        )
        reader.close()


def ocr_figures(count: int) -> None:
    reader = RapidOcrReader()
    lines, used, took = read_one(reader, note_picture())
    print(
        f"first picture (the worker started, models loaded): CPU {used:.0f} ms, "
        f"wall {took:.0f} ms; read {lines}"
    )
    notes = [
        draw_note((f"丰巢快递柜 取件码 {8000 + i}", "请于今晚十点前取走")) for i in range(count)
    ]
    shots = [chat_screenshot(i) for i in range(count)]
    for name, pictures in (("parcel note 640x220", notes), ("chat screenshot 1080x1920", shots)):
        cpu, wall = measure(reader, pictures)
        cs, ws = percentiles(cpu), percentiles(wall)
        print(
            f"{name}: CPU p50 {cs['p50']:.0f} ms, p95 {cs['p95']:.0f} ms; "
            f"wall p50 {ws['p50']:.0f} ms, p95 {ws['p95']:.0f} ms (n={len(pictures)}, "
            f"load {load_average()})"
        )
    print(f"screenshot read as: {read_one(reader, shots[0])[0][:4]} …")
    print(f"the OCR worker's RSS: {rss_mb(reader.worker_pid or 0):.0f} MB")
    reader.close()


async def flood(messages: int, distinct: int) -> None:
    stickers = {f"/s{i}.gif": sticker(i) for i in range(2 * distinct)}
    server = PictureServer(stickers)
    with bench_data_dir("pictures") as data_dir:
        settings = MemorySettings(
            memory_data_dir=data_dir, memory_image_allowed_hosts=frozenset({"127.0.0.1"})
        )
        memory = await open_memory(
            settings, embedder=RandomQueryEmbedder(384), maintenance_interval=None
        )
        reader = PictureReader.from_settings(settings, memory.parts)
        try:
            for minute in (0, 1):
                paths = [f"/s{minute * distinct + i % distinct}.gif" for i in range(messages)]
                await one_minute(memory, reader, server, stickers, paths, minute * messages)
        finally:
            await reader.aclose()
            await memory.aclose()
            server.close()


async def one_minute(
    memory: TemporalMemory,
    reader: PictureReader,
    server: PictureServer,
    stickers: dict[str, bytes],
    paths: list[str],
    first_id: int,
) -> None:
    """``paths`` sent as stickers over one minute, each read as the bot would."""
    pid = os.getpid()
    before, deepest, jobs = rss_mb(pid), 0, []
    hits_before = sum(server.hits.values())
    started = time.perf_counter()
    for i, path in enumerate(paths):
        turn = TurnInput(
            user_id=20000 + i % 50,
            group_id=30003,
            role="user",
            content="[动画表情]",
            message_id=first_id + i,
            self_id=10001,
        )
        digest = hashlib.md5(stickers[path]).hexdigest()  # NapCat's name of it
        ref = PictureRef(
            0, "[动画表情]", url=server.url(path), file_key=digest, sticker=True, declared_size=2000
        )
        job = await reader.start(turn, [ref])
        stored = await memory.parts.writer.add_turn(turn, embed_later=True)
        if job is not None and stored.turn is not None:
            reader.follow(job, stored.turn)
            jobs.append(job)
        deepest = max(deepest, reader.queued)
        await asyncio.sleep(60 / len(paths))  # the flood spread over one minute
    await reader.settled()
    took = time.perf_counter() - started
    statuses: dict[str, int] = {}
    for job in jobs:
        for reading in job.done.result():
            key = f"{reading.status} ({reading.reason or 'read'})"
            statuses[key] = statuses.get(key, 0) + 1
    print(
        f"sticker flood: {len(paths)} stickers ({len(set(paths))} distinct) in {took:.0f} s; "
        f"fetched {sum(server.hits.values()) - hits_before}; {statuses}; deepest queue "
        f"{deepest}; RSS {before:.0f} -> {rss_mb(pid):.0f} MB (load {load_average()})"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--pictures", type=int, default=10)
    parser.add_argument("--stickers", type=int, default=200)
    parser.add_argument("--distinct", type=int, default=20)
    parser.add_argument("--memory-only", action="store_true", help="only the worker's memory")
    args = parser.parse_args()
    print(f"== pictures remembered ({machine_line()}), load {load_average()}")
    worker_memory()
    if args.memory_only:
        return
    ocr_figures(args.pictures)
    asyncio.run(flood(args.stickers, args.distinct))


if __name__ == "__main__":
    main()
