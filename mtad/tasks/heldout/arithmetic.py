"""Arithmetic word problems with drawn numbers: sums, products, division, percentages, unit and
temperature conversions, ages, money, rates, averages, fractions, times and interest. Each generator
draws its numbers and one of its templates (`arithmetic.json`) and returns the text with the draw
itself (template and numbers), the problem's subject on the held-out split."""

from __future__ import annotations

import random

from ...split import held_out
from .prose import cap
from .request_data import table
from .subjects import people


def _templates(problem: str) -> tuple[str, ...]:
    return table("arithmetic")["problems"][problem]


def _drawn_template(rng: random.Random, problem: str) -> tuple[int, str]:
    """One of a problem's templates, and its index (part of the problem's subject)."""
    templates = _templates(problem)
    i = rng.randrange(len(templates))
    return i, templates[i]


def _sum_problem(rng: random.Random) -> tuple[str, tuple]:
    a, b, c = rng.randint(2, 9999), rng.randint(2, 9999), rng.randint(2, 999)
    i, template = _drawn_template(rng, "sum")
    return template.format(a=a, b=b, c=c), (i, a, b, c)


def _product_problem(rng: random.Random) -> tuple[str, tuple]:
    a, b = rng.randint(2, 999), rng.randint(2, 99)
    i, template = _drawn_template(rng, "product")
    return template.format(a=a, b=b, p=a * b), (i, a, b)


def _division_problem(rng: random.Random) -> tuple[str, tuple]:
    a, b = rng.randint(50, 9999), rng.randint(3, 40)
    (template,) = _templates("division")  # one wording: no template is drawn
    return template.format(a=a, b=b), (a, b)


def _percentage_problem(rng: random.Random) -> tuple[str, tuple]:
    p, n, m = rng.choice([5, 10, 12, 15, 20, 25, 30, 40, 60, 75]), rng.randint(20, 2000), rng.randint(20, 2000)
    i, template = _drawn_template(rng, "percentage")
    cur = rng.choice(table("arithmetic")["currency_signs"])
    return template.format(p=p, n=n, m=m, t=n + m, cur=cur), (i, p, n, m, cur)


def _conversion_problem(rng: random.Random) -> tuple[str, tuple]:
    data = table("arithmetic")
    if rng.random() < 0.25:
        t = rng.randint(-30, 110)
        pair = rng.choice(data["temperature_scales"])  # a tuple: its repr is part of the subject's key
        (template,) = _templates("temperature")
        return template.format(t=t, a=pair[0], b=pair[1]), (t, pair)
    src, dst, _ = rng.choice(data["units"])
    x = rng.choice([rng.randint(1, 500), round(rng.uniform(0.5, 100), 1)])
    i, template = _drawn_template(rng, "conversion")
    return template.format(x=x, a=src, b=dst), (i, x, src, dst)


def _age_problem(rng: random.Random) -> tuple[str, tuple]:
    a, b = rng.sample(people(), 2)
    k, young, d, y = rng.randint(2, 5), rng.randint(3, 15), rng.randint(2, 30), rng.randint(2, 20)
    i, template = _drawn_template(rng, "age")
    slots = dict(a=a, b=b, k=k, young=young, d=d, y=y, young_later=young + y, total=2 * young + d, b_now=young + d)
    return template.format(**slots), (i, a, b, k, young, d, y)


def _money_problem(rng: random.Random) -> tuple[str, tuple]:
    data = table("arithmetic")
    name, item, cur = rng.choice(people()), rng.choice(data["items"]), rng.choice(data["currency_signs"])
    n, price, note = rng.randint(2, 12), rng.choice([0.5, 1.25, 2, 3.5, 4.75, 6, 8.2, 12]), rng.choice([20, 50, 100])
    wage, hours, weeks, tip = rng.randint(9, 45), rng.randint(10, 40), rng.randint(2, 8), rng.choice([10, 15, 18, 20])
    i, template = _drawn_template(rng, "money")
    meal = round(price * n * 4 + wage, 2)
    slots = dict(name=name, n=n, item=item, item_cap=cap(item), cur=cur, price=price, note=note, wage=wage)
    slots.update(hours=hours, weeks=weeks, tip=tip, meal=meal)
    return template.format(**slots), (i, name, item, cur, n, price, note, wage, hours, weeks, tip)


def _rate_problem(rng: random.Random) -> tuple[str, tuple]:
    a, b = rng.sample(people(), 2)
    d, h, v = rng.randint(20, 900), rng.randint(2, 12), rng.randint(30, 130)
    x, y, m = rng.randint(2, 12), rng.randint(2, 12), rng.randint(10, 90)
    i, template = _drawn_template(rng, "rate")
    return template.format(a=a, b=b, d=d, h=h, v=v, x=x, y=y, m=m), (i, a, b, d, h, v, x, y, m)


def _average_problem(rng: random.Random) -> tuple[str, tuple]:
    name = rng.choice(people())
    scores = [rng.randint(40, 100) for _ in range(rng.randint(3, 6))]
    target = rng.randint(60, 95)
    listed = ", ".join(map(str, scores))
    i, template = _drawn_template(rng, "average")
    return template.format(l=listed, name=name, t=target), (i, name, *scores, target)


def _fraction_problem(rng: random.Random) -> tuple[str, tuple]:
    a, b, c, d = rng.randint(1, 9), rng.randint(2, 12), rng.randint(1, 9), rng.randint(2, 12)
    n = rng.randint(10, 400)
    i, template = _drawn_template(rng, "fraction")
    return template.format(a=a, b=b, c=c, d=d, n=n), (i, a, b, c, d, n)


def _time_problem(rng: random.Random) -> tuple[str, tuple]:
    h, m, d = rng.randint(6, 20), rng.choice([0, 10, 15, 20, 30, 45, 50]), rng.randint(15, 300)
    p, r, t = rng.choice([500, 1000, 2500, 8000]), rng.choice([2, 3, 4.5, 5, 7]), rng.randint(2, 10)
    people_count, grams, more = rng.randint(2, 6), rng.choice([150, 200, 250, 400]), rng.randint(7, 20)
    i, template = _drawn_template(rng, "time")
    text = template.format(h=h, m=m, d=d, p=p, r=r, t=t, people=people_count, grams=grams, more=more)
    return text, (i, h, m, d, p, r, t)


# the generators; a problem's subject key starts with its generator's name
ARITHMETIC_PROBLEMS = (
    _sum_problem,
    _product_problem,
    _division_problem,
    _percentage_problem,
    _conversion_problem,
    _age_problem,
    _money_problem,
    _rate_problem,
    _average_problem,
    _fraction_problem,
    _time_problem,
)


def arithmetic_problem(rng: random.Random, held: bool) -> tuple[str, str]:
    """A problem and its subject key, on one side of the split."""
    # the subject is the problem itself (its numbers and names): drawn again until it falls on this side
    for _ in range(200):
        problem = rng.choice(ARITHMETIC_PROBLEMS)
        text, numbers = problem(rng)
        key = f"{problem.__name__}:{numbers}"
        if held_out(key) == held:
            return text, key
    raise RuntimeError("no arithmetic problem fell on this side of the split")
