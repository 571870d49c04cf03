"""Write assets/prompts/distill-more.jsonl and distill-extra.jsonl: composed training prompts for `distill`.

Why: the feature draft agreed with the target on 0.50 of the tokens of answers to
prompts it was trained on and on 0.36 of held-out ones (166 train prompts): it
had learned those answers, not the target. More distinct prompts, and so more
distinct answers, are the cheapest lever a CPU has. Prompts are composed from
topic lists (assets/prompts/topics.json) by fixed templates (seeded, so the files are reproducible); any prompt
that appears in a benchmark suite or in distill.jsonl is left out, so the
benchmark still measures prompts the draft has never seen.

distill-more.jsonl (`compose`, seed 0) came first and must not move; distill-extra.jsonl
(`compose_extra`, seed 1) adds other kinds of request by other templates: everyday advice,
facts for a child or a beginner, define/list/compare/reasons, role-play, letters, product copy,
data formats, web code, unit tests, debugging a given snippet, shell one-liners, unit
conversions and word problems, grammar fixes. It also leaves out every prompt of distill-more.

Run: python scripts/make_distill_prompts.py   (rewrites both files)
"""

from __future__ import annotations

import argparse
import json
import random
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PROMPTS_DIR = ROOT / "assets" / "prompts"
OUT = PROMPTS_DIR / "distill-more.jsonl"
OUT_EXTRA = PROMPTS_DIR / "distill-extra.jsonl"
# The topic lists and templates the prompts are composed from: data, kept apart from the composing code.
TOPICS = json.loads((PROMPTS_DIR / "topics.json").read_text(encoding="utf-8"))


def math_prompts(rng: random.Random) -> list[str]:
    out = []
    for _ in range(40):
        a, b = rng.randint(11, 99), rng.randint(11, 99)
        op = rng.choice(["multiplied by", "plus", "minus", "times"])
        out.append(f"What is {a} {op} {b}?" + rng.choice(["", " Show your steps.", " Explain how you got it."]))
    for _ in range(15):
        a, b = rng.randint(100, 999), rng.randint(2, 12)
        out.append(f"What is {a} divided by {b}? Give the remainder too.")
    for _ in range(20):
        a, x, b = rng.randint(2, 9), rng.randint(1, 12), rng.randint(1, 20)
        out.append(f"Solve for x: {a}x + {b} = {a * x + b}.")
    items = [("pencils", "cents"), ("books", "dollars"), ("tickets", "euros"), ("oranges", "cents"),
             ("notebooks", "dollars"), ("cupcakes", "pounds")]
    for _ in range(20):
        item, unit = rng.choice(items)
        n, p = rng.randint(3, 25), rng.randint(2, 60)
        out.append(f"One of the {item} costs {p} {unit}. How much do {n} {item} cost?")
    for _ in range(12):
        s, t = rng.randint(30, 120), rng.randint(2, 6)
        out.append(f"A car travels at {s} kilometres per hour for {t} hours. How far does it go?")
    for _ in range(12):
        p, w = rng.randint(5, 40), rng.randint(2, 12)
        out.append(f"What is {p}% of {w * 50}?")
    for _ in range(10):
        w, h = rng.randint(3, 20), rng.randint(3, 20)
        out.append(f"What is the area and the perimeter of a rectangle that is {w} cm wide and {h} cm tall?")
    out += [
        "What is the sum of the angles in a triangle?", "How many seconds are there in a day?",
        "Is 91 a prime number? Explain.", "What is the square root of 144?", "Convert 3/4 to a percentage.",
        "What is the average of 4, 8, 15, 16 and 23?", "How many minutes are in three and a half hours?",
        "If a pizza is cut into 8 slices and I eat 3, what fraction is left?", "What is 2 to the power of 10?",
        "Round 3.14159 to two decimal places.", "What is the least common multiple of 6 and 8?",
        "Explain how to add two fractions with different denominators.", "What is a prime number?",
    ]
    return out


def compose(rng: random.Random) -> list[dict]:
    rows: list[tuple[str, str]] = []
    rows += [("code", f"Write a Python function that {t}.") for t in TOPICS["py_tasks"]]
    rows += [("code", f"Write a Python class for {c}.") for c in TOPICS["py_classes"]]
    rows += [("code", f"Write a {lang} function that {t}.") for lang, t in TOPICS["other_code"]]
    rows += [("code", p) for p in TOPICS["shell_sql"] + TOPICS["code_questions"]]
    rows += [("code", f"Explain what this Python code does:\n\n```python\n{s}\n```") for s in TOPICS["snippets"]]
    rows += [("code", f"How could this Python code be improved?\n\n```python\n{s}\n```") for s in TOPICS["snippets"]]
    rows += [("explain", f"Explain {c}{rng.choice(TOPICS['audiences'])}.") for c in TOPICS["concepts"]]
    rows += [("explain", f"What is {c}?") for c in rng.sample(TOPICS["concepts"], 25)]
    rows += [("chat", f"Give me {rng.choice(['three', 'five', 'some'])} tips for {t}.") for t in TOPICS["tip_topics"]]
    rows += [("chat", f"How do I {h}?") for h in TOPICS["how_tos"]]
    rows += [("story", f"Write {form} about {s}.") for form, subjects in TOPICS["forms"] for s in subjects]
    rows += [("explain", f"What is the difference between {a} and {b}?") for a, b in TOPICS["compare"]]
    rows += [("chat", f"Can you suggest {r}?") for r in TOPICS["recommend"]]
    rows += [("chat", q) for q in TOPICS["questions"] + TOPICS["chat_openers"]]
    rows += [("rewrite", f"{task}\n\n\"{p}\"")
             for p in TOPICS["passages"] for task in rng.sample(TOPICS["passage_tasks"], 3)]
    rows += [("rewrite", f"Translate into {lang}: \"{s}\"")
             for s in TOPICS["sentences"] for lang in rng.sample(TOPICS["languages"], 2)]
    rows += [("math", p) for p in math_prompts(rng)]
    return [{"category": c, "split": "train", "prompt": p} for c, p in rows]


# ---------------------------------------------------------------------------
# distill-extra.jsonl: other kinds of requests, by other templates (its own seed, see main)
# ---------------------------------------------------------------------------


def math_extra(rng: random.Random) -> list[str]:
    out = []
    step = lambda: rng.choice(TOPICS["step_suffixes"])  # noqa: E731
    for a, b, values in TOPICS["conversions"]:
        out += [rng.choice(TOPICS["conversion_templates"]).format(n=n, a=a, b=b) for n in values]
    for _ in range(10):
        a, b = rng.sample(range(1, 6), 2)
        total = (a + b) * rng.randint(3, 12)
        out.append(f"Share {total} sweets between two children in the ratio {a}:{b}. How many does each get?" + step())
    for _ in range(10):
        p, pct = rng.choice([20, 40, 60, 80, 120, 200, 300]), rng.choice([5, 10, 15, 20, 25, 30, 50])
        out.append(f"A price goes up from {p} dollars to {p * (100 + pct) // 100} dollars. "
                   f"What is the percentage increase?" + step())
    for _ in range(10):
        h, m, d = rng.randint(1, 11), rng.choice([0, 15, 20, 30, 45, 50]), rng.randint(75, 175)
        out.append(f"A film starts at {h}:{m:02d} and lasts {d} minutes. What time does it end?")
    for _ in range(10):
        scores = [rng.randint(55, 95) for _ in range(rng.randint(3, 5))]
        target = min(95, sum(scores) // len(scores) + rng.randint(1, 5))
        out.append(f"My test scores are {', '.join(map(str, scores))}. What do I need on the next test "
                   f"to get an average of {target}?" + step())
    for _ in range(10):
        d, s = rng.randint(2, 24), rng.choice([3, 4, 5, 6])
        out.append(f"How long does it take to walk {d} km at {s} km per hour? Give the answer in hours and minutes.")
    for _ in range(10):
        b, d = rng.randint(2, 9), rng.randint(2, 9)
        a, c = rng.randint(1, b - 1), rng.randint(1, d - 1)
        out.append(f"What is {a}/{b} + {c}/{d}? Simplify the answer." + step())
    for _ in range(8):
        x, y = rng.choice([n for n in range(11, 99) if n % 10]) / 10, rng.choice([2, 3, 4, 5, 6, 7, 8, 9, 12, 15]) / 10
        out.append(f"What is {x} times {y}?" + step())
    for _ in range(8):
        n = rng.choice([13, 15, 17, 19, 21, 23, 25, 30, 32, 35])
        out.append(f"What is the square root of {n * n}? How could I find it without a calculator?")
    for _ in range(8):
        p, r, t = rng.choice([500, 1000, 2000, 5000]), rng.choice([2, 3, 4, 5]), rng.randint(2, 6)
        out.append(f"I put {p} dollars in a savings account at {r}% simple interest per year. "
                   f"How much interest do I earn in {t} years?")
    for _ in range(8):
        r, b = rng.randint(2, 9), rng.randint(2, 9)
        out.append(f"A bag has {r} red marbles and {b} blue marbles. If I pick one at random, "
                   f"what is the probability that it is blue?" + step())
    for _ in range(8):
        a, b, c = rng.randint(2, 30), rng.randint(2, 30), rng.randint(2, 30)
        out.append(f"What is the volume of a box that is {a} cm by {b} cm by {c} cm?")
    for _ in range(6):
        out.append(f"What is the circumference of a circle with a diameter of {rng.randint(3, 40)} cm?")
    for _ in range(8):
        b, h = rng.randint(3, 24), rng.randint(3, 24)
        out.append(f"A triangle has a base of {b} cm and a height of {h} cm. What is its area?" + step())
    for _ in range(8):
        a, d = rng.randint(1, 20), rng.randint(2, 9)
        seq = ", ".join(str(a + d * i) for i in range(4))
        out.append(f"What comes next in the sequence {seq}, ...? Explain the rule.")
    for _ in range(8):
        a, b, x = rng.randint(2, 6), rng.randint(1, 9), rng.randint(3, 15)
        out.append(f"Solve for x: {a}(x - {b}) = {a * (x - b)}." + step())
    for _ in range(8):
        a, x, b = rng.randint(2, 6), rng.randint(1, 10), rng.randint(1, 9)
        out.append(f"Solve for x: x/{a} + {b} = {x + b}." + step())
    for _ in range(6):
        a, n = rng.randint(2, 9), rng.randint(5, 30)
        out.append(f"Anna is {a} years older than her brother, and together they are {2 * n + a} years old. "
                   f"How old is each of them?" + step())
    for _ in range(6):
        w, d = rng.randint(2, 6), rng.randint(2, 8)
        out.append(f"{w} workers can paint a fence in {d} hours. How long would it take one worker, "
                   f"and how long would {2 * w} workers take?")
    return out + TOPICS["math_concepts"]


def story_extra(rng: random.Random) -> list[str]:
    out = []
    for a, b, topic in TOPICS["dialogues"]:
        who = f"{a} and {b}" if b else a
        out.append(f"Write a short dialogue between {who} about {topic}.")
    out += [f"Write {x}." for x in TOPICS["letters"]]
    out += [t.format(p) for p in TOPICS["products"] for t in rng.sample(TOPICS["product_templates"], 2)]
    out += [f"Write a short fable with animals that teaches a lesson about {m}." for m in TOPICS["fable_morals"]]
    out += [f"Write a diary entry by {x}." for x in TOPICS["diary_entries"]]
    out += [f"Describe {p} using all five senses." for p in TOPICS["places"]]
    out += [f"Write an acrostic poem using the word {w}." for w in TOPICS["acrostic_words"]]
    out += [f"Write a rhyming couplet about {x}." for x in TOPICS["couplets"]]
    out += [f"Write a riddle whose answer is {x}." for x in TOPICS["riddle_answers"]]
    return out


def compose_extra(rng: random.Random) -> list[dict]:
    rows: list[tuple[str, str]] = []
    rows += [("chat", t.format(d, n=rng.randint(2, 6)))
             for d in TOPICS["dishes"] for t in rng.sample(TOPICS["recipe_templates"], 2)]
    for _ in range(20):
        a, b, c = rng.sample(TOPICS["ingredients"], 3)
        rows.append(("chat", f"I have {a}, {b} and {c} at home. What could I make for dinner?"))
    rows += [("chat", t.format(c=c, n=rng.randint(2, 5)))
             for c in TOPICS["cities"] for t in rng.sample(TOPICS["city_templates"], 2)]
    questions = ("cooking_questions", "travel_questions", "health_questions", "money_questions", "study_questions",
                 "multi_step")
    rows += [("chat", q) for name in questions for q in TOPICS[name]]
    rows += [("chat", rng.choice(TOPICS["role_templates"]).format(r=r, t=t)) for r, t in TOPICS["roles"]]
    rows += [("chat", f"Tell me a {rng.choice(['short', 'silly', 'clean'])} joke about {s}.")
             for s in TOPICS["joke_subjects"]]
    rows += [("chat", f"Here is a riddle: {r} Give the answer and explain it.") for r in TOPICS["riddles"]]
    rows += [("explain", t.format(x))
             for x in TOPICS["explain_topics"] for t in rng.sample(TOPICS["explain_templates"], 2)]
    rows += [("explain", rng.choice(TOPICS["people_templates"]).format(p)) for p in TOPICS["people"]]
    rows += [("explain", rng.choice(TOPICS["term_templates"]).format(t)) for t in TOPICS["terms"]]
    rows += [("explain", rng.choice(TOPICS["difference_templates"]).format(a=a, b=b)) for a, b in TOPICS["differences"]]
    rows += [("explain", rng.choice(TOPICS["list_templates"]).format(n=rng.choice(["three", "five", "seven"]), x=x))
             for x in TOPICS["lists"]]
    rows += [("explain", f"Give {rng.choice(['two', 'three', 'four'])} reasons why {r}.") for r in TOPICS["reasons"]]
    rows += [("explain", f"Give two arguments for and two against {d}.") for d in TOPICS["debates"]]
    rows += [("rewrite", f"{task}\n\n\"{p}\"")
             for p in TOPICS["new_passages"] for task in rng.sample(TOPICS["new_passage_tasks"], 3)]
    rows += [("rewrite", rng.choice(TOPICS["grammar_templates"]).format(s)) for s in TOPICS["bad_sentences"]]
    rows += [("rewrite", f"{task} \"{s}\"") for task, sentences in TOPICS["change_sentences"] for s in sentences]
    code_lists = ("data_tasks", "web_tasks", "sql_questions", "code_concepts")
    rows += [("code", t) for name in code_lists for t in TOPICS[name]]
    rows += [("code", f"Write a regular expression that matches {r}, and explain each part.")
             for r in TOPICS["regexes"]]
    rows += [("code", f"Explain what this regular expression matches: `{r}`") for r in TOPICS["explain_regexes"]]
    rows += [("code", f"Write a JavaScript function that {t}.") for t in TOPICS["js_tasks"]]
    rows += [("code", f"Given {TOPICS['sql_schema']}, write a SQL query that {t}.") for t in TOPICS["sql_tasks"]]
    rows += [("code", f"Give me a shell one-liner that {t}.") for t in TOPICS["shell_oneliners"]]
    rows += [("code", f"Explain what this shell command does: `{c}`") for c in TOPICS["explain_commands"]]
    rows += [("code", rng.choice(TOPICS["test_templates"]).format(f)) for f in TOPICS["tested_functions"]]
    rows += [("code", f"This Python code should {goal}, but {bug}. Find the bug and fix it:\n\n```python\n{c}\n```")
             for goal, bug, c in TOPICS["buggy"]]
    rows += [("code", f"This JavaScript should {goal}, but {bug}. Why, and how do I fix it?\n\n```javascript\n{c}\n```")
             for goal, bug, c in TOPICS["js_buggy"]]
    rows += [("code", f"What does this Python error mean and how do I fix it?\n\n{e}") for e in TOPICS["errors"]]
    rows += [("code", f"Write a Python script that {t}.") for t in TOPICS["py_scripts"]]
    rows += [("math", p) for p in math_extra(rng)]
    rows += [("story", s) for s in story_extra(rng)]
    return [{"category": c, "split": "train", "prompt": p} for c, p in rows]


def taken_prompts() -> set[str]:
    """Every prompt of distill.jsonl (train and held-out) and of the benchmark suites: never composed."""
    taken = set()
    for path in [PROMPTS_DIR / "distill.jsonl", *sorted((ROOT / "assets" / "suites").glob("*.jsonl"))]:
        taken |= {json.loads(line)["prompt"] for line in path.read_text().splitlines() if line.strip()}
    return taken


def keep_new(rows: list[dict], taken: set[str]) -> list[dict]:
    """The rows whose prompt is not taken yet, in order and once each; their prompts are taken after."""
    kept = []
    for row in rows:
        if row["prompt"] not in taken:
            taken.add(row["prompt"])
            kept.append(row)
    return kept


def main() -> None:
    taken = taken_prompts()
    # One generator per file, so growing distill-extra never moves a prompt of distill-more.
    for out, rows in ((OUT, compose(random.Random(0))), (OUT_EXTRA, compose_extra(random.Random(1)))):
        rows = keep_new(rows, taken)
        out.write_text("".join(json.dumps(r) + "\n" for r in rows))
        print(f"wrote {len(rows)} prompts to {out}")


if __name__ == "__main__":
    argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter).parse_args()
    main()
