"""Write assets/prompts/distill-more.jsonl: about a thousand more training prompts for `distill`.

Why: the feature draft agreed with the target on 0.50 of the tokens of answers to
prompts it was trained on and on 0.36 of held-out ones (166 train prompts): it
had learned those answers, not the target. More distinct prompts, and so more
distinct answers, are the cheapest lever a CPU has. Prompts are composed from
topic lists by fixed templates (seeded, so the file is reproducible); any prompt
that appears in a benchmark suite or in distill.jsonl is left out, so the
benchmark still measures prompts the draft has never seen.

Run: python scripts/make_distill_prompts.py   (rewrites the file)
"""

from __future__ import annotations

import json
import random
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
OUT = ROOT / "assets" / "prompts" / "distill-more.jsonl"

PY_TASKS = [
    "returns the sum of the squares of a list of numbers", "counts the vowels in a string",
    "returns the second largest number in a list", "removes all whitespace from a string",
    "checks whether two strings are anagrams", "returns the factorial of n using recursion",
    "computes the greatest common divisor of two integers", "converts a binary string to an integer",
    "returns the n-th triangular number", "splits a list into chunks of size k",
    "rotates a list by k positions", "returns the most common element of a list",
    "capitalises the first letter of every word in a sentence", "checks whether a year is a leap year",
    "returns all prime numbers below n", "computes the average of a list, ignoring None values",
    "transposes a matrix given as a list of lists", "returns the running total of a list",
    "finds the longest word in a sentence", "checks whether a list is sorted",
    "returns the intersection of two lists without duplicates", "computes the dot product of two vectors",
    "converts seconds into hours, minutes and seconds", "returns the digits of an integer as a list",
    "checks whether a number is a perfect square", "reverses the order of words in a sentence",
    "counts the lines in a text file", "writes a list of dictionaries to a JSON file",
    "returns the median of a list of numbers", "removes the duplicates from a list while keeping the order",
    "zips two lists into a dictionary", "returns the keys of a dictionary sorted by their values",
    "computes compound interest", "converts a temperature from Fahrenheit to Celsius",
    "generates a random password of a given length", "checks whether a string contains only digits",
    "returns the number of days between two dates", "finds the index of the first negative number in a list",
    "computes the length of the longest increasing run in a list", "returns a histogram of letter counts",
    "merges two dictionaries, adding the values of shared keys", "checks whether brackets in a string are balanced",
    "converts a Roman numeral to an integer", "converts an integer to a Roman numeral",
    "returns the power set of a small list", "computes the Levenshtein distance between two strings",
    "implements bubble sort", "implements insertion sort", "implements merge sort", "implements quicksort",
    "finds the minimum and maximum of a list in one pass", "returns the cumulative product of a list",
    "checks whether a number is an Armstrong number", "returns the sum of the digits of a number",
    "pads a string on the left with zeros to a given width", "counts how many times a substring occurs",
    "parses a query string into a dictionary", "normalises a list of numbers to the range 0 to 1",
    "returns the n most frequent words in a text", "removes punctuation from a string",
    "checks whether a matrix is symmetric", "computes the area of a circle from its radius",
    "returns the common prefix of a list of strings", "groups a list of words by their first letter",
    "converts a list of tuples into a dictionary", "returns every other element of a list",
    "checks whether a string is a valid IPv4 address", "computes the mean and standard deviation of a list",
    "returns the nth row of Pascal's triangle", "flattens a dictionary of dictionaries",
    "returns the unique characters of a string in order", "checks whether a number is even without using %",
    "counts the words in a file", "sorts a list of dictionaries by a given key",
    "returns the difference between the largest and smallest values in a list",
    "computes the body mass index from weight and height", "simulates rolling two dice 1000 times",
    "returns the list of divisors of a number", "checks whether two rectangles overlap",
    "formats a number with thousands separators", "truncates a string to n characters with an ellipsis",
    "returns the Collatz sequence starting at n", "counts the uppercase and lowercase letters in a string",
    "retries a function up to three times when it raises an exception", "times how long a function takes to run",
    "reads a text file and returns its lines without trailing newlines", "converts a hex colour to RGB",
    "implements a simple caesar cipher", "checks whether a list has any duplicates",
    "returns the indices of two numbers that add up to a target", "finds the missing number in a list from 1 to n",
    "computes the moving average of a list with a window size", "returns True if all elements of a list are equal",
    "counts the number of set bits in an integer", "interleaves two lists",
]
PY_CLASSES = [
    "a bank account with deposit and withdraw methods", "a queue with enqueue and dequeue methods",
    "a rectangle with area and perimeter methods", "a to-do list that can add, remove and list tasks",
    "a simple counter that can be incremented and reset", "a temperature reading that converts between units",
    "a student with a name and a list of grades and a method for the average",
    "a linked list with append and print methods", "a shopping cart that totals the prices of its items",
    "a 2D point with a method that computes the distance to another point", "a timer used as a context manager",
    "a library that lends and returns books", "an inventory of products with quantities",
    "a playing card and a deck that can be shuffled", "a binary tree node with an insert method",
]
OTHER_CODE = [
    ("JavaScript", "reverses the words in a sentence"), ("JavaScript", "returns the sum of an array of numbers"),
    ("JavaScript", "checks whether a string is a palindrome"), ("JavaScript", "capitalises every word in a string"),
    ("JavaScript", "finds the largest number in an array"), ("JavaScript", "counts the occurrences of each item in an array"),
    ("JavaScript", "fetches JSON from a URL and logs it"), ("JavaScript", "formats a date as YYYY-MM-DD"),
    ("C", "reverses a string in place"), ("C", "checks whether a number is prime"),
    ("C", "computes the sum of an array of integers"), ("C", "swaps two integers using pointers"),
    ("Rust", "returns the largest element of a slice"), ("Rust", "counts the words in a string"),
    ("Rust", "checks whether a number is a palindrome"), ("Go", "reverses a slice of integers"),
    ("Go", "counts the vowels in a string"), ("Go", "returns the factorial of a number"),
    ("Java", "checks whether a string is a palindrome"), ("Java", "returns the average of an array of doubles"),
    ("Java", "prints the multiplication table of a number"), ("TypeScript", "groups objects by a key"),
    ("C++", "sorts a vector of integers in descending order"), ("C++", "computes the n-th Fibonacci number"),
]
SHELL_SQL = [
    "Write a bash script that counts the lines in every .txt file in a directory.",
    "Write a bash script that backs up a folder into a dated tar archive.",
    "Write a bash one-liner that finds the ten largest files under the current directory.",
    "Write a bash script that checks whether a website is reachable.",
    "Write a SQL query that counts the orders placed in each month.",
    "Write a SQL query that lists the employees who earn more than their managers.",
    "Write a SQL query that returns the average price of products in each category.",
    "Write a SQL query that finds duplicate email addresses in a users table.",
    "Write a SQL statement that creates a table for blog posts with a title, a body and a date.",
    "Write a SQL query that joins a customers table and an orders table and shows each customer's order count.",
]
CODE_QUESTIONS = [
    "What is the difference between a list and a tuple in Python?", "What does the yield keyword do in Python?",
    "Explain list comprehensions in Python with an example.", "What is a Python decorator? Show a small example.",
    "How do I read a JSON file in Python?", "What is the difference between == and is in Python?",
    "How do virtual environments work in Python?", "Explain what recursion is with a Python example.",
    "What is the difference between a process and a thread?", "What is Big O notation?",
    "Explain how a hash table works.", "What is the difference between git merge and git rebase?",
    "How do I handle exceptions in Python?", "What are Python type hints and why use them?",
    "Explain the difference between a stack and a queue.", "What is an API?",
    "How does a for loop differ from a while loop?", "What is object-oriented programming?",
    "Explain what a REST API is.", "What does the __init__ method do in a Python class?",
    "How do I sort a dictionary by value in Python?", "What is the purpose of unit tests?",
    "Explain what a closure is in JavaScript.", "What is the difference between let, const and var in JavaScript?",
    "How do I write a docstring for a Python function?", "What is a lambda function in Python?",
    "Explain the difference between shallow and deep copies in Python.", "What is a regular expression?",
    "How do I open and write to a file in Python?", "What does the with statement do in Python?",
    "What is the difference between compiled and interpreted languages?", "Explain what an index is in a database.",
    "What is a race condition?", "How do I reverse a list in Python?", "What are *args and **kwargs in Python?",
    "Explain how binary search works.", "What is a memory leak?", "How does garbage collection work in Python?",
]
SNIPPETS = [
    "def avg(xs):\n    return sum(xs) / len(xs)",
    "for i in range(len(names)):\n    print(i, names[i])",
    "def is_even(n):\n    if n % 2 == 0:\n        return True\n    else:\n        return False",
    "result = []\nfor x in data:\n    if x > 0:\n        result.append(x * 2)",
    "def find(xs, target):\n    for i in range(len(xs)):\n        if xs[i] == target:\n            return i\n    return -1",
    "import json\nwith open('config.json') as f:\n    config = json.load(f)\nprint(config['name'])",
    "def count(words):\n    d = {}\n    for w in words:\n        if w in d:\n            d[w] += 1\n        else:\n            d[w] = 1\n    return d",
    "s = ''\nfor word in words:\n    s = s + word + ' '\nprint(s)",
    "def fact(n):\n    return 1 if n <= 1 else n * fact(n - 1)",
    "nums = [1, 2, 3, 4]\nsquares = list(map(lambda x: x * x, nums))",
    "def greet(name=None):\n    if name == None:\n        name = 'world'\n    print('Hello, ' + name)",
    "total = 0\ni = 0\nwhile i < 10:\n    total += i\n    i += 1",
]

CONCEPTS = [
    "photosynthesis", "gravity", "the water cycle", "inflation", "compound interest", "the immune system",
    "how vaccines work", "the greenhouse effect", "black holes", "how the heart pumps blood", "evolution",
    "supply and demand", "democracy", "the internet", "how airplanes fly", "electricity", "magnets",
    "the seasons", "tides", "volcanoes", "earthquakes", "rainbows", "how a computer stores data", "DNA",
    "the French Revolution", "the Roman Empire", "the Industrial Revolution", "the Renaissance",
    "machine learning", "a neural network", "encryption", "cloud computing", "blockchain", "recycling",
    "renewable energy", "solar panels", "how batteries work", "the stock market", "taxes", "interest rates",
    "the moon's phases", "how bees make honey", "how sound travels", "why leaves change colour in autumn",
    "how a refrigerator works", "the food chain", "the scientific method", "atoms", "friction",
    "why we dream", "how memory works", "probability", "fractions", "the Pythagorean theorem", "climate change",
    "how a bill becomes a law", "the printing press", "the causes of the First World War", "plate tectonics",
    "how GPS works", "what a credit score is", "how the eye sees colour", "what a calorie is", "metabolism",
]
AUDIENCES = ["", " to a ten-year-old", " in simple terms", " in three sentences", " to a beginner",
             " with an everyday example"]
TIP_TOPICS = [
    "staying healthy while working from home", "learning to cook", "running a first 5K", "saving for a holiday",
    "keeping a plant alive", "public speaking", "writing a good essay", "learning a new language",
    "managing stress", "reducing screen time", "keeping a clean kitchen", "taking better photos with a phone",
    "travelling on a budget", "starting a small garden", "being more productive in the morning",
    "preparing for an exam", "making a good first impression", "reading more books", "drinking more water",
    "staying motivated to exercise", "organising a small closet", "moving to a new apartment",
    "taking care of a new puppy", "hosting a dinner party", "working in a team", "giving constructive feedback",
    "keeping a long-distance friendship", "learning to swim as an adult", "cycling to work", "decluttering a room",
    "writing a CV", "negotiating a salary", "planning a birthday party", "caring for a cat", "meal prepping",
]
HOW_TOS = [
    "boil an egg", "change a flat tyre on a bicycle", "write a cover letter", "make a cup of tea",
    "start running", "plant tomatoes", "clean a laptop keyboard", "learn to touch type", "budget my monthly pay",
    "set goals for the new year", "apologise to a friend", "fall asleep faster", "make a paper airplane",
    "tie a tie", "stop procrastinating", "ask for a raise", "back up my photos", "choose a good password",
    "prepare for a long flight", "bake bread at home", "remove a coffee stain", "learn to draw",
    "make a smoothie", "train for a hike", "speak more confidently", "improve my handwriting",
    "remember people's names", "build a reading habit", "calm down before an exam", "plan a road trip",
]
FORMS = [
    ("a short poem", ["the rain", "a city at night", "friendship", "the first snow", "a lighthouse",
                      "a cup of coffee", "the mountains", "spring flowers", "an old clock", "the stars"]),
    ("a haiku", ["the moon", "a cat", "the sea", "morning fog", "a river", "summer heat", "a train"]),
    ("a short story", ["a lost umbrella", "a dragon who is afraid of the dark", "a girl who finds a map",
                       "a talking tree", "a detective cat", "the last day of summer", "a time traveller",
                       "a baker who bakes magic bread", "two friends on a boat", "a robot in a library"]),
    ("a short email", ["asking a colleague for help with a report", "inviting friends to a picnic",
                       "thanking a client for their order", "rescheduling a meeting",
                       "asking a landlord to fix the heating", "welcoming a new team member"]),
    ("a short note", ["wishing a friend happy birthday", "congratulating a colleague on a promotion",
                      "apologising for missing a party", "thanking a doctor", "saying goodbye to a coworker"]),
    ("a product description", ["a reusable water bottle", "a pair of running shoes", "a desk lamp",
                               "a backpack", "a board game"]),
    ("a limerick", ["a cat who loves fish", "a forgetful wizard", "a very tall giraffe"]),
]
COMPARE = [
    ("a virus", "a bacterium"), ("weather", "season"), ("a lake", "a sea"), ("speed", "velocity"),
    ("a simile", "a metaphor"), ("an alligator", "a crocodile"), ("a frog", "a toad"), ("baking soda", "baking powder"),
    ("a hurricane", "a tornado"), ("a planet", "a star"), ("an asteroid", "a comet"), ("a democracy", "a monarchy"),
    ("saving", "investing"), ("a debit card", "a credit card"), ("mass", "weight"), ("a rabbit", "a hare"),
    ("an ocean", "a sea"), ("RAM", "storage"), ("a book", "an e-book"), ("tea", "coffee"), ("renting", "buying a home"),
    ("a mountain", "a hill"), ("empathy", "sympathy"), ("affect", "effect"), ("a town", "a city"),
]
RECOMMEND = [
    "a few books for someone who likes mystery novels", "some healthy snacks for work", "a name for a pet goldfish",
    "a few board games for a family evening", "some easy houseplants", "a weekend trip near the sea",
    "a few hobbies that do not cost much", "a good breakfast before a long day", "some podcasts topics for commuting",
    "a name for a bakery", "a few ideas for a school science project", "gift ideas for a grandparent",
    "a playlist theme for a road trip", "some exercises I can do without equipment", "a vegetarian lunch",
    "a title for a blog about gardening", "ideas for a first date", "a few fun facts about octopuses",
    "names for a fantasy kingdom", "a slogan for a recycling campaign",
]
QUESTIONS = [
    "Why do cats purr?", "Why is the ocean salty?", "How far away is the moon?", "Why do we have leap years?",
    "What causes thunder?", "How do fish breathe underwater?", "Why do onions make us cry?",
    "How many bones are in the human body?", "What is the tallest mountain in the world?",
    "Why do birds migrate?", "How do noise-cancelling headphones work?", "What is the largest animal on Earth?",
    "Why is sleep important?", "How do chameleons change colour?", "What makes popcorn pop?",
    "Why do we yawn?", "How are rainbows formed?", "What is the speed of light?", "Why is the grass green?",
    "How do snowflakes form?", "What are the primary colours?", "Why do stars twinkle?",
    "What is the capital of Australia?", "Who invented the telephone?", "How do ants find food?",
    "What is the difference between a fruit and a vegetable?", "Why does ice float?", "How do bridges stay up?",
    "What is a good age to start learning music?", "Is it better to study in the morning or at night?",
]
CHAT_OPENERS = [
    "Hello! Can you help me with something?", "Good morning! What can you do?", "Tell me a fun fact.",
    "I'm bored. Any ideas?", "Can you tell me a joke?", "What is your favourite book and why?",
    "I just finished a big project at work. How should I celebrate?", "I can't decide what to do this weekend.",
    "I want to get fit this year. Where do I start?", "My friend is sad. How can I cheer them up?",
    "I have ten minutes free. What's something useful I could learn?", "Can you motivate me to clean my room?",
]

PASSAGES = [
    "The library will close early on Friday because of a staff training day. Books can still be returned "
    "through the drop box outside the main door.",
    "Our team finished the first version of the app last week. Users liked the design but found the sign-up "
    "process too long, so we will simplify it next month.",
    "The town is planning to plant two hundred trees along the river this spring. Volunteers are welcome to "
    "join on Saturday mornings.",
    "Bees are important for farming because they pollinate many crops. Their numbers have fallen in recent "
    "years, partly because of pesticides and the loss of wild flowers.",
    "The museum has opened a new room about the history of flight. It shows early gliders, old engines and a "
    "model of the first passenger plane.",
    "Regular walking improves heart health, helps control weight and lifts mood. Even twenty minutes a day "
    "makes a noticeable difference.",
    "The school's music concert raised money for new instruments. Parents and teachers helped sell tickets "
    "and snacks during the interval.",
    "A new bus line will connect the train station with the hospital from next week. Buses will run every "
    "fifteen minutes during the day.",
    "Solar panels turn sunlight into electricity. They work best in direct sun but still produce some power "
    "on cloudy days.",
    "The company will move to a new office in June. The new building has more meeting rooms, a larger kitchen "
    "and space for bicycles.",
    "Hey, can u send me the report by tmrw? The boss wants it before the meeting and I dont have the numbers yet.",
    "i think we should go to the beach on sunday its gonna be sunny and we havent been there in ages",
    "The weather today will be mostly cloudy with a chance of light rain in the afternoon and a high of "
    "fifteen degrees.",
    "Reading to children every day helps them learn new words, improves their attention and builds a habit "
    "that can last a lifetime.",
    "Our café now serves breakfast until noon on weekends. Try the new pancakes with berries and honey.",
]
PASSAGE_TASKS = [
    "Summarise the following text in one sentence:", "Rewrite the following text in a more formal tone:",
    "Rewrite the following text so that a child could understand it:", "Turn the following text into a short list "
    "of bullet points:", "Correct the grammar and spelling in the following text:",
    "Write a catchy headline for the following text:", "Translate the following text into Spanish:",
]
SENTENCES = [
    "The cat sat quietly by the window.", "We are going to the market tomorrow.", "Thank you for your help.",
    "Where is the nearest train station?", "I would like a cup of coffee, please.", "The meeting starts at ten.",
    "My brother lives in a small village.", "It is raining again today.",
]
LANGUAGES = ["French", "German", "Spanish", "Italian"]


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
    rows += [("code", f"Write a Python function that {t}.") for t in PY_TASKS]
    rows += [("code", f"Write a Python class for {c}.") for c in PY_CLASSES]
    rows += [("code", f"Write a {lang} function that {t}.") for lang, t in OTHER_CODE]
    rows += [("code", p) for p in SHELL_SQL + CODE_QUESTIONS]
    rows += [("code", f"Explain what this Python code does:\n\n```python\n{s}\n```") for s in SNIPPETS]
    rows += [("code", f"How could this Python code be improved?\n\n```python\n{s}\n```") for s in SNIPPETS]
    rows += [("explain", f"Explain {c}{rng.choice(AUDIENCES)}.") for c in CONCEPTS]
    rows += [("explain", f"What is {c}?") for c in rng.sample(CONCEPTS, 25)]
    rows += [("chat", f"Give me {rng.choice(['three', 'five', 'some'])} tips for {t}.") for t in TIP_TOPICS]
    rows += [("chat", f"How do I {h}?") for h in HOW_TOS]
    rows += [("story", f"Write {form} about {s}.") for form, subjects in FORMS for s in subjects]
    rows += [("explain", f"What is the difference between {a} and {b}?") for a, b in COMPARE]
    rows += [("chat", f"Can you suggest {r}?") for r in RECOMMEND]
    rows += [("chat", q) for q in QUESTIONS + CHAT_OPENERS]
    rows += [("rewrite", f"{task}\n\n\"{p}\"") for p in PASSAGES for task in rng.sample(PASSAGE_TASKS, 3)]
    rows += [("rewrite", f"Translate into {lang}: \"{s}\"") for s in SENTENCES for lang in rng.sample(LANGUAGES, 2)]
    rows += [("math", p) for p in math_prompts(rng)]
    return [{"category": c, "split": "train", "prompt": p} for c, p in rows]


def main() -> None:
    rng = random.Random(0)
    taken = set()
    for path in [ROOT / "assets" / "prompts" / "distill.jsonl", *sorted((ROOT / "assets" / "suites").glob("*.jsonl"))]:
        taken |= {json.loads(line)["prompt"] for line in path.read_text().splitlines() if line.strip()}
    seen, rows = set(), []
    for row in compose(rng):
        if row["prompt"] not in taken and row["prompt"] not in seen:
            seen.add(row["prompt"])
            rows.append(row)
    OUT.write_text("".join(json.dumps(r) + "\n" for r in rows))
    print(f"wrote {len(rows)} prompts to {OUT}")


if __name__ == "__main__":
    main()
