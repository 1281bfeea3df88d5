"""A labelled retrieval benchmark, generated (deterministic, no downloads).

Multi-session QQ conversations in Chinese and English — private chats and group sessions of
several users — spread over ~75 days before ``NOW``. Each session states facts among everyday
chatter; every other session states the same kinds of facts with other values (distractors
that say similar things in another scope), and each session also holds near-misses of its own
(other orders, other trips, other people). Questions carry the evidence turns they need:

* ``single``   one fact, asked in other words than it was said;
* ``keyword``  names, numbers and order ids ("ORD583920 买的是什么");
* ``time``     the answer depends on 昨天 / 上周三 / 上个月 / 刚才 … (several similar events on
               other days in the same session);
* ``multi``    several evidence turns of the same session on different days ("我都读了哪些书");
* ``context``  the answer is the turn after the one naming the topic ("在哪个会议室？" —
               "5楼301，下午3点"): found only through the window around the anchor.

``python -m bench.retrieval.generate`` prints a summary; ``build()`` returns the data.
"""

from __future__ import annotations

import random
from collections import Counter
from dataclasses import dataclass, field
from datetime import date, datetime, time, timedelta
from zoneinfo import ZoneInfo

TZ = ZoneInfo("Asia/Shanghai")
# A Wednesday evening; "上个月" is February 2024, "上周" is 11-17 March.
NOW = datetime(2024, 3, 20, 21, 0, tzinfo=TZ)
DAYS = 75
SEED = 20240320


@dataclass
class Turn:
    key: str  # message_uuid in the database
    user_id: int
    group_id: int | None
    role: str
    content: str
    created_at: datetime


@dataclass
class Question:
    qid: str
    user_id: int
    group_id: int | None
    text: str
    evidence: list[str]
    category: str  # single | keyword | time | multi
    language: str


@dataclass
class Session:
    index: int
    user_id: int
    group_id: int | None
    language: str
    rng: random.Random
    turns: list[Turn] = field(default_factory=list)
    questions: list[Question] = field(default_factory=list)
    busy: set[date] = field(default_factory=set)

    def say(self, when: datetime, text: str, reply: str | None = None) -> str:
        """A user turn (and the bot's reply a minute later); returns the user turn's key."""
        key = f"bench:{self.index}:{len(self.turns)}"
        self.turns.append(Turn(key, self.user_id, self.group_id, "user", text, when))
        if reply is not None:
            self.turns.append(
                Turn(
                    f"bench:{self.index}:{len(self.turns)}",
                    self.user_id,
                    self.group_id,
                    "assistant",
                    reply,
                    when + timedelta(minutes=1),
                )
            )
        return key

    def ask(self, text: str, evidence: list[str], category: str) -> None:
        qid = f"q{self.index}-{len(self.questions)}"
        self.questions.append(
            Question(qid, self.user_id, self.group_id, text, evidence, category, self.language)
        )

    def at(self, days_ago: int, hour: int | None = None) -> datetime:
        day = NOW.date() - timedelta(days=days_ago)
        hour = self.rng.randint(9, 22) if hour is None else hour
        moment = datetime.combine(day, time(hour, self.rng.randint(0, 58)), tzinfo=TZ)
        return min(moment, NOW - timedelta(minutes=30))

    def free_days(self, count: int, low: int, high: int) -> list[int]:
        """``count`` distinct offsets (days ago) in [low, high] not used by another event."""
        choices = [
            d for d in range(low, high + 1) if NOW.date() - timedelta(days=d) not in self.busy
        ]
        picked = self.rng.sample(choices, count)
        self.busy.update(NOW.date() - timedelta(days=d) for d in picked)
        return picked


# ------------------------------------------------------------------ vocabulary


def _words(*lines: str) -> list[str]:
    return " ".join(lines).split()


PETS = _words("咪咪 旺财 豆豆 球球 花花 小白 大黄 毛毛 团子 年糕 可乐 布丁 奶茶 芝麻 土豆 橘子")
PETS_EN = _words("Biscuit Luna Max Milo Pepper Coco Oscar Nala Rocky Daisy Ziggy Mochi")
ANIMALS = ["猫", "狗", "兔子", "仓鼠"]
ANIMALS_EN = ["cat", "dog", "rabbit", "hamster"]
ITEMS = _words(
    "机械键盘 蓝牙耳机 电饭煲 空气炸锅 羽绒服 跑步鞋 保温杯 台灯 显示器 行李箱 咖啡机 ",
    "电动牙刷 双肩包 加湿器 投影仪 瑜伽垫 雨伞 充电宝 吸尘器 手机壳",
)
ITEMS_EN = _words(
    "keyboard headphones rice-cooker air-fryer jacket running-shoes thermos desk-lamp monitor ",
    "suitcase coffee-machine backpack humidifier projector yoga-mat umbrella power-bank",
)
NAMES = _words("张伟 李娜 王芳 刘洋 陈静 杨帆 赵磊 黄丽 周杰 吴敏 徐涛 孙悦 马超 朱琳 胡军 郭婷")
NAMES_EN = _words("Alice Bob Carol David Emma Frank Grace Henry Irene Jack Kate Leo")
CITIES = _words("上海 杭州 深圳 成都 武汉 西安 南京 重庆 厦门 青岛 长沙 苏州 天津 大连")
CITIES_EN = _words("Boston Denver Seattle Austin Chicago Portland Atlanta Miami Dallas Phoenix")
BOOKS = _words(
    "三体 活着 围城 平凡的世界 百年孤独 红楼梦 白夜行 解忧杂货店 人类简史 明朝那些事儿 ",
    "追风筝的人 小王子 挪威的森林 长安的荔枝",
)
BOOKS_EN = [
    "Dune",
    "Educated",
    "Sapiens",
    "The Hobbit",
    "Atomic Habits",
    "Project Hail Mary",
    "The Martian",
    "Circe",
    "Klara and the Sun",
    "Thinking, Fast and Slow",
]
SKILLS = _words("吉他 游泳 日语 书法 烘焙 摄影 围棋 滑板 钢琴 拳击 画画 编程")
SKILLS_EN = _words("guitar swimming Japanese pottery baking photography chess piano boxing")
WEEKDAYS_ZH = "一二三四五六日"
WEEKDAYS_EN = ["Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday", "Sunday"]
MONTHS_EN = "January February March April May June July August September October November December"

FILLER_ZH = [
    "今天好累啊",
    "吃饭了吗",
    "哈哈哈哈",
    "在吗",
    "今天天气不错",
    "下雨了，没带伞",
    "加班到现在",
    "周末有什么安排",
    "这个电影挺好看的",
    "有点困了，先睡了",
    "早上好",
    "晚安",
    "最近想养只宠物",
    "快递怎么还没到",
    "最近可能要出差",
    "想买个新手机",
    "这本书好难读",
    "朋友过生日，不知道送什么",
    "房子有点小，想换个大点的",
    "今天地铁好挤",
    "老板又开会了",
    "中午吃了面条",
    "想去旅游",
    "最近在减肥",
    "又胖了两斤",
    "好想放假",
    "你觉得我该换工作吗",
    "刚打完球",
    "今天的咖啡太苦了",
    "楼下新开了一家店",
    "网速好慢",
    "电脑又卡了",
    "明天要早起",
    "这周好忙",
    "下班了",
    "猫粮快吃完了",
    "快递员说明天送到",
    "出差好辛苦",
    "学东西真难",
    "密码老是记不住",
]
REPLY_ZH = [
    "辛苦啦，早点休息",
    "好的，我记住了",
    "哈哈，确实",
    "听起来不错",
    "注意身体哦",
    "嗯嗯，明白",
    "加油！",
    "那挺好的",
    "需要我提醒你吗",
    "我在呢",
    "有什么想聊的吗",
    "别太累了",
]
FILLER_EN = [
    "so tired today",
    "did you eat yet",
    "lol",
    "you there?",
    "nice weather today",
    "it's raining and I forgot my umbrella",
    "working late again",
    "any plans for the weekend?",
    "that movie was pretty good",
    "going to bed, night",
    "good morning",
    "thinking about getting a pet",
    "my package still hasn't arrived",
    "might have to travel for work soon",
    "I want a new phone",
    "this book is hard to get through",
    "my friend's birthday is coming up, no idea what to get",
    "the subway was packed today",
    "another meeting with the boss",
    "had noodles for lunch",
    "I need a vacation",
    "trying to lose weight",
    "just finished playing basketball",
    "the coffee is too bitter today",
    "a new shop opened downstairs",
    "the internet is so slow",
    "learning new things is hard",
    "I keep forgetting my passwords",
]
REPLY_EN = [
    "Get some rest!",
    "Got it, I'll remember that.",
    "Haha, true.",
    "Sounds good.",
    "Take care of yourself.",
    "Understood.",
    "You've got this!",
    "Nice!",
    "Want me to remind you?",
    "I'm here.",
]


def _order_id(rng: random.Random) -> str:
    return f"ORD{rng.randint(100000, 999999)}"


def _time_expression(days_ago: int, language: str) -> str | None:
    """How a person would name the day ``days_ago`` before NOW (None: no simple way)."""
    day = NOW.date() - timedelta(days=days_ago)
    this_monday = NOW.date() - timedelta(days=NOW.weekday())
    last_monday = this_monday - timedelta(days=7)
    if language == "zh":
        if days_ago == 1:
            return "昨天"
        if days_ago == 2:
            return "前天"
        if 3 <= days_ago <= 6 and day >= this_monday:
            return f"{'三四五六'[days_ago - 3]}天前"
        if last_monday <= day < this_monday:
            return f"上周{WEEKDAYS_ZH[day.weekday()]}"
        return f"{day.month}月{day.day}日"
    if days_ago == 1:
        return "yesterday"
    if 2 <= days_ago <= 6 and day >= this_monday:
        return f"{days_ago} days ago"
    if last_monday <= day < this_monday:
        return f"last {WEEKDAYS_EN[day.weekday()]}"
    return f"{MONTHS_EN.split()[day.month - 1]} {day.day}"


# ------------------------------------------------------------------ facts


def pet_fact(s: Session) -> None:
    r = s.rng
    if s.language == "zh":
        animal, other = r.sample(ANIMALS, 2)
        name, other_name = r.sample(PETS, 2)
        key = s.say(
            s.at(r.randint(30, 70)),
            f"我家{animal}叫{name}，{r.randint(1, 9)}岁了，特别黏人",
            f"{name}听起来好可爱！",
        )
        s.say(s.at(r.randint(5, 29)), f"我同事家的{other}叫{other_name}", "哈哈，名字真可爱")
        s.ask(f"我养的那只{animal}叫什么名字来着？", [key], "single")
    else:
        animal, other = r.sample(ANIMALS_EN, 2)
        name, other_name = r.sample(PETS_EN, 2)
        key = s.say(
            s.at(r.randint(30, 70)),
            f"my {animal} is called {name}, she's {r.randint(1, 9)} and super clingy",
            f"{name} sounds adorable!",
        )
        s.say(s.at(r.randint(5, 29)), f"my coworker's {other} is named {other_name}", "Cute name!")
        s.ask(f"what's the name of my {animal} again?", [key], "single")


def rent_fact(s: Session) -> None:
    r = s.rng
    rent = r.randrange(1800, 9000, 100)
    if s.language == "zh":
        key = s.say(
            s.at(r.randint(20, 60)), f"房东说下个月起房租涨到{rent}块一个月", "涨得有点多啊"
        )
        s.say(s.at(r.randint(3, 19)), f"水电费这个月交了{r.randint(100, 400)}块", "记下了")
        s.ask("我现在每个月租金要付多少钱？", [key], "single")
    else:
        key = s.say(
            s.at(r.randint(20, 60)),
            f"landlord says the rent goes up to ${rent} a month starting next month",
            "That's quite a jump.",
        )
        s.say(s.at(r.randint(3, 19)), f"paid ${r.randint(60, 200)} for utilities", "Noted.")
        s.ask("how much is my monthly rent now?", [key], "single")


def order_facts(s: Session) -> None:
    r = s.rng
    items = r.sample(ITEMS if s.language == "zh" else ITEMS_EN, 3)
    keys, ids = [], []
    for item in items:
        oid = _order_id(r)
        ids.append(oid)
        if s.language == "zh":
            text = r.choice(
                [
                    f"我的订单{oid}买的是{item}，今天发货了",
                    f"下单了一个{item}，订单号{oid}",
                    f"订单号是{oid}，里面是{item}",
                ]
            )
            keys.append(s.say(s.at(r.randint(3, 60)), text, "好的，订单号我帮你记下了"))
        else:
            text = r.choice(
                [
                    f"my order {oid} is a {item}, it shipped today",
                    f"ordered a {item}, order number {oid}",
                ]
            )
            keys.append(s.say(s.at(r.randint(3, 60)), text, "Okay, I noted the order number."))
    for i in (0, 1):
        if s.language == "zh":
            s.ask(
                r.choice([f"{ids[i]}那个订单买的是什么？", f"订单{ids[i]}里是什么东西"]),
                [keys[i]],
                "keyword",
            )
        else:
            s.ask(f"what was in order {ids[i]}?", [keys[i]], "keyword")


def birthday_facts(s: Session) -> None:
    r = s.rng
    people = r.sample(NAMES if s.language == "zh" else NAMES_EN, 3)
    keys = []
    for person in people:
        month, day = r.randint(1, 12), r.randint(1, 28)
        if s.language == "zh":
            text = f"{person}的生日是{month}月{day}日，到时候提醒我买礼物"
            keys.append(s.say(s.at(r.randint(3, 70)), text, "好的，到时候提醒你"))
        else:
            month_name = MONTHS_EN.split()[month - 1]
            text = f"{person}'s birthday is {month_name} {day}, remind me to get a gift"
            keys.append(s.say(s.at(r.randint(3, 70)), text, "Sure, I'll remind you."))
    for i in r.sample(range(3), 2):
        if s.language == "zh":
            s.ask(f"{people[i]}生日是几月几号？", [keys[i]], "keyword")
        else:
            s.ask(f"when is {people[i]}'s birthday?", [keys[i]], "keyword")


def purchase_facts(s: Session) -> None:
    """Similar purchases on several days: only the day tells which one is meant."""
    r = s.rng
    offsets = sorted(s.free_days(2, 1, 2) + s.free_days(3, 3, 12))
    items = r.sample(ITEMS if s.language == "zh" else ITEMS_EN, len(offsets))
    keys = {}
    for days_ago, item in zip(offsets, items, strict=True):
        if s.language == "zh":
            text = f"今天买了个{item}，花了{r.randint(50, 900)}块"
            keys[days_ago] = s.say(s.at(days_ago), text, "买得不错")
        else:
            text = f"bought a {item} today, ${r.randint(10, 300)}"
            keys[days_ago] = s.say(s.at(days_ago), text, "Nice purchase.")
    for days_ago in r.sample(offsets, 3):
        expression = _time_expression(days_ago, s.language)
        if s.language == "zh":
            s.ask(f"{expression}我买了什么东西？", [keys[days_ago]], "time")
        else:
            s.ask(f"what did I buy {expression}?", [keys[days_ago]], "time")


def trip_facts(s: Session) -> None:
    """Trips in last week, last month and two months ago; asked by week and by month."""
    r = s.rng
    this_monday = NOW.date() - timedelta(days=NOW.weekday())
    last_week = [(NOW.date() - (this_monday - timedelta(days=7 - i))).days for i in range(5)]
    feb = [(NOW.date() - date(2024, 2, d)).days for d in range(1, 29)]
    jan = [(NOW.date() - date(2024, 1, d)).days for d in range(8, 31)]
    cities = r.sample(CITIES if s.language == "zh" else CITIES_EN, 3)
    keys = []
    for pool, city in zip((last_week, feb, jan), cities, strict=True):
        days_ago = r.choice([d for d in pool if NOW.date() - timedelta(days=d) not in s.busy])
        s.busy.add(NOW.date() - timedelta(days=days_ago))
        if s.language == "zh":
            text = f"今天到{city}出差了，见了两个客户"
            keys.append(s.say(s.at(days_ago), text, "出差辛苦了"))
        else:
            text = f"flew to {city} today for work, met two clients"
            keys.append(s.say(s.at(days_ago), text, "Safe travels!"))
    if s.language == "zh":
        s.ask("上周我去哪个城市出差了？", [keys[0]], "time")
        s.ask("上个月我去哪出差了？", [keys[1]], "time")
    else:
        s.ask("which city did I travel to last week?", [keys[0]], "time")
        s.ask("where did I go for work last month?", [keys[1]], "time")


def recent_code_fact(s: Session) -> None:
    r = s.rng
    old, new = r.randint(100000, 999999), r.randint(100000, 999999)
    if s.language == "zh":
        s.say(s.at(r.randint(4, 30)), f"家里wifi密码改成了{old}", "记住了")
        key = s.say(NOW - timedelta(minutes=r.randint(3, 40)), f"新的wifi密码是{new}", "好的")
        s.ask("刚才我说的wifi密码是多少？", [key], "time")
    else:
        s.say(s.at(r.randint(4, 30)), f"changed the wifi password to {old}", "Got it.")
        key = s.say(
            NOW - timedelta(minutes=r.randint(3, 40)), f"new wifi password is {new}", "Okay."
        )
        s.ask("what was the wifi password I just told you?", [key], "time")


def book_facts(s: Session) -> None:
    r = s.rng
    books = r.sample(BOOKS if s.language == "zh" else BOOKS_EN, 3)
    keys = []
    templates_zh = ["最近在读《{}》，挺有意思的", "刚开始看《{}》", "《{}》看完了，推荐给你"]
    templates_en = [
        "started reading {} this week",
        "I'm halfway through {}",
        "finished {}, loved it",
    ]
    for book, days_ago in zip(books, s.free_days(3, 3, 70), strict=True):
        template = r.choice(templates_zh if s.language == "zh" else templates_en)
        reply = "好书！" if s.language == "zh" else "Great pick!"
        keys.append(s.say(s.at(days_ago), template.format(book), reply))
    if s.language == "zh":
        s.ask("我最近都读了哪些书？", keys, "multi")
    else:
        s.ask("which books have I been reading lately?", keys, "multi")


def skill_facts(s: Session) -> None:
    r = s.rng
    skills = r.sample(SKILLS if s.language == "zh" else SKILLS_EN, 2)
    keys = []
    for skill, days_ago in zip(skills, s.free_days(2, 3, 70), strict=True):
        if s.language == "zh":
            text = r.choice([f"报了个{skill}班，每周去两次", f"开始学{skill}了，好难"])
            keys.append(s.say(s.at(days_ago), text, "坚持下去！"))
        else:
            text = r.choice(
                [f"signed up for {skill} lessons, twice a week", f"started learning {skill}"]
            )
            keys.append(s.say(s.at(days_ago), text, "Keep it up!"))
    if s.language == "zh":
        s.ask("我报名学了哪些东西？", keys, "multi")
    else:
        s.ask("what classes or lessons did I sign up for?", keys, "multi")


ROOMS = ["301", "405", "1208", "B2", "718", "902", "A3", "1101"]
HOSPITALS = _words("协和医院 华山医院 瑞金医院 同仁医院 中山医院 湘雅医院")
RESTAURANTS_EN = ["Nobu", "Luigi's", "Sakura", "The Oak Room", "Bistro 21", "Blue Door"]


def split_answer_facts(s: Session) -> None:
    """The answer sits in the turn after the one that names the topic: only a window finds it
    (the answer itself shares no word with the question)."""
    r = s.rng
    days = s.free_days(2, 3, 60)
    if s.language == "zh":
        when = s.at(days[0])
        s.say(when, "下周的项目评审会我订好会议室了", "好的，在哪个会议室？几点？")
        answer = s.say(
            when + timedelta(minutes=2),
            f"{r.randint(2, 9)}楼{r.choice(ROOMS)}，下午{r.randint(2, 5)}点",
        )
        s.ask("项目评审会在哪个会议室开？", [answer], "context")
        when = s.at(days[1])
        s.say(when, "我约了看牙医", "约在哪家医院、什么时候？")
        answer = s.say(
            when + timedelta(minutes=2),
            f"{r.choice(HOSPITALS)}，周{r.choice(WEEKDAYS_ZH[:5])}上午{r.randint(8, 11)}点",
        )
        s.ask("我跟牙医约在哪家医院了？", [answer], "context")
    else:
        when = s.at(days[0])
        s.say(when, "I booked a table for our anniversary dinner", "Nice! Where and when?")
        answer = s.say(when + timedelta(minutes=2), f"{r.choice(RESTAURANTS_EN)}, 7pm on the 12th")
        s.ask("where did I book the anniversary dinner?", [answer], "context")
        when = s.at(days[1])
        s.say(when, "finally made a dentist appointment", "Good. Which clinic, and when?")
        answer = s.say(
            when + timedelta(minutes=2),
            f"Smile Dental on {r.choice(WEEKDAYS_EN[:5])}, {r.randint(8, 11)}am",
        )
        s.ask("which clinic is my dentist appointment at?", [answer], "context")


def chatter(s: Session) -> None:
    """Everyday talk on most days: what the facts hide in."""
    r = s.rng
    users, replies = (FILLER_ZH, REPLY_ZH) if s.language == "zh" else (FILLER_EN, REPLY_EN)
    for days_ago in range(DAYS, -1, -1):
        if r.random() < 0.35:
            continue
        for _ in range(r.randint(1, 3)):
            s.say(s.at(days_ago), r.choice(users), r.choice(replies) if r.random() < 0.8 else None)


FACTS = [
    pet_fact,
    rent_fact,
    order_facts,
    birthday_facts,
    purchase_facts,
    trip_facts,
    recent_code_fact,
    book_facts,
    skill_facts,
    split_answer_facts,
]


@dataclass(frozen=True)
class Dataset:
    turns: list[Turn]
    questions: list[Question]
    sessions: int


def build(seed: int = SEED) -> Dataset:
    """Every session's turns and questions (same seed, same data)."""
    rng = random.Random(seed)
    sessions: list[tuple[int, int | None, str]] = []
    zh_users = [10_001 + i for i in range(18)]
    en_users = [20_001 + i for i in range(6)]
    sessions += [(u, None, "zh") for u in zh_users] + [(u, None, "en") for u in en_users]
    sessions += [(u, 500_001, "zh") for u in zh_users[:6]]
    sessions += [(u, 500_002, "zh") for u in zh_users[6:12]]
    sessions += [(u, 500_003, "en") for u in en_users[:3]]
    turns: list[Turn] = []
    questions: list[Question] = []
    for index, (user, group, language) in enumerate(sessions):
        session = Session(index, user, group, language, random.Random(rng.random()))
        for fact in FACTS:
            fact(session)
        chatter(session)
        turns += session.turns
        questions += session.questions
    return Dataset(turns=turns, questions=questions, sessions=len(sessions))


def main() -> None:
    data = build()
    print(f"{len(data.turns)} turns in {data.sessions} sessions, {len(data.questions)} questions")
    print("by category:", dict(Counter(q.category for q in data.questions)))
    print("by language:", dict(Counter(q.language for q in data.questions)))
    for q in data.questions[:12]:
        print(f"  [{q.category}] {q.text} -> {q.evidence}")


if __name__ == "__main__":
    main()
