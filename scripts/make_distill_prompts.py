"""Write assets/prompts/distill-more.jsonl and distill-extra.jsonl: composed training prompts for `distill`.

Why: the feature draft agreed with the target on 0.50 of the tokens of answers to
prompts it was trained on and on 0.36 of held-out ones (166 train prompts): it
had learned those answers, not the target. More distinct prompts, and so more
distinct answers, are the cheapest lever a CPU has. Prompts are composed from
topic lists by fixed templates (seeded, so the files are reproducible); any prompt
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

import json
import random
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PROMPTS_DIR = ROOT / "assets" / "prompts"
OUT = PROMPTS_DIR / "distill-more.jsonl"
OUT_EXTRA = PROMPTS_DIR / "distill-extra.jsonl"

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


# ---------------------------------------------------------------------------
# distill-extra.jsonl: other kinds of requests, by other templates (its own seed, see main)
# ---------------------------------------------------------------------------

DISHES = [
    "vegetable soup", "guacamole", "banana bread", "egg fried rice", "a tomato pasta sauce", "hummus",
    "overnight oats", "a Greek salad", "a mild chicken curry", "lentil soup", "a cheese omelette",
    "oatmeal cookies", "a fruit salad", "roasted root vegetables", "mashed potatoes", "a grilled cheese sandwich",
    "pizza dough", "homemade lemonade", "French toast", "a bean chili", "apple crumble", "a tofu stir-fry",
    "garlic bread", "tzatziki", "rice pudding", "homemade granola", "a Spanish potato omelette", "carrot cake",
    "iced tea", "a chickpea salad", "pumpkin soup", "a simple risotto", "fish tacos", "a berry smoothie bowl",
]
RECIPE_TEMPLATES = [
    "Give me a recipe for {} with the ingredients first and then numbered steps.",
    "Write a beginner-friendly recipe for {} that serves {n}.",
    "How long does it take to make {}, and what equipment do I need?",
    "What are the most common mistakes people make when cooking {}?",
]
INGREDIENTS = [
    "potatoes", "spinach", "canned tuna", "chickpeas", "a courgette", "mushrooms", "leftover rice", "tortillas",
    "a tin of tomatoes", "cheddar", "two eggs", "frozen peas", "a red pepper", "an onion", "pasta", "a lemon",
    "some yogurt", "bread that is a bit stale", "a sweet potato", "half a cabbage", "bacon", "feta cheese",
]
COOKING_QUESTIONS = [
    "Why does bread go stale so quickly?", "How can I tell when pasta is cooked?", "Is it safe to reheat cooked rice?",
    "What can I use instead of eggs in baking?", "How do I stop a cut avocado from turning brown?",
    "What is the difference between baking and roasting?", "How do I sharpen a kitchen knife safely?",
    "How long can I keep leftovers in the fridge?", "Why do recipes say to let meat rest after cooking?",
    "How do I keep onions from burning in the pan?", "Why did my cake sink in the middle?",
    "How much salt should I add to pasta water?", "What herbs go well with roast chicken?",
    "How do I make rice that is not sticky?", "Can I freeze bread, and how do I thaw it?",
    "What is a good way to use up overripe bananas?", "Why do my cookies spread so much in the oven?",
    "How can I make a salad more filling?",
]
CITIES = [
    "Lisbon", "Kyoto", "Barcelona", "Edinburgh", "New York", "Istanbul", "Prague", "Mexico City", "Vienna",
    "Cape Town", "Buenos Aires", "Amsterdam", "Seoul", "Marrakech", "Copenhagen", "Sydney", "Budapest",
    "Vancouver", "Hanoi", "Rome", "Dublin", "Bangkok",
]
CITY_TEMPLATES = [
    "I have {n} days in {c}. Plan a relaxed itinerary for me.", "What are some things to do in {c} on a rainy day?",
    "Which local dishes should I try when I visit {c}?", "What is the best way to get around {c} without a car?",
    "What should a first-time visitor to {c} know before arriving?",
]
TRAVEL_QUESTIONS = [
    "How do I get over jet lag quickly?", "Is it cheaper to book flights early or at the last minute?",
    "What should I do if I lose my passport abroad?", "How can I avoid getting ill while travelling?",
    "How do I travel for a week with only hand luggage?", "Is travel insurance worth it for a short trip?",
    "How can I stay safe when travelling alone?", "What are some tips for a long train journey?",
    "How do I choose a good hotel in a city I don't know?", "What should I do if my flight is cancelled?",
    "How can I learn a few useful phrases before a holiday?", "How do I keep my phone charged while travelling?",
    "What should I check before renting a car abroad?", "How can I make a long car trip fun for children?",
]
HEALTH_QUESTIONS = [
    "How much sleep does a teenager need?", "Is it bad to sit all day? What can I do about it?",
    "How can I build a habit of stretching every morning?", "What are some simple ways to eat more vegetables?",
    "How can I protect my eyes when I work at a screen all day?",
    "Is it better to exercise in the morning or in the evening?",
    "How do I start meditating if I have never done it?", "How many steps a day should I aim for?",
    "What is a balanced lunch I can take to work?", "How can I cut down on sugar without feeling hungry?",
    "Why is it important to warm up before exercise?", "How can I keep a good posture at my desk?",
    "What are healthy snacks for an afternoon slump?", "How can I stop snacking late at night?",
    "Is coffee bad for me?", "How can I get back into exercise after an injury?",
    "What are the benefits of walking every day?", "How do I wash my hands properly?",
    "How can I keep my teeth healthy?", "What should be in a basic first aid kit at home?",
]
MONEY_QUESTIONS = [
    "What is an emergency fund and how big should it be?", "How can I pay off credit card debt faster?",
    "Should I pay off debt first or start saving?", "How do I start investing with a small amount of money?",
    "What are some ways to lower my electricity bill?", "How can I stop buying things on impulse?",
    "What should I check before signing a phone contract?", "How do I teach my child about money?",
    "Is it worth buying a used car instead of a new one?", "How do I split bills fairly with flatmates?",
    "What is the 50/30/20 rule for budgeting?", "What questions should I ask before taking out a loan?",
    "How can I save money on a wedding?", "What is a pension and when should I start paying into one?",
    "How do I keep track of my spending each month?", "What is the difference between a need and a want?",
    "How can a student save money?", "What are some cheap ways to have fun with friends?",
]
STUDY_QUESTIONS = [
    "How do I take good notes in a lecture?", "What is the Pomodoro technique and does it work?",
    "How can I memorise vocabulary faster?", "How should I plan revision for four exams in two weeks?",
    "What is active recall?", "How do I write a strong thesis statement?", "How do I read a scientific paper?",
    "How do I cite a website in APA style?",
    "I have to give a five-minute presentation in class. How should I prepare?",
    "How can I get better at maths if I always get stuck?", "What is spaced repetition and how do I use it?",
    "How can I study effectively with a part-time job?", "How do I stop rereading and actually learn?",
    "What should I do the night before an exam?", "How do I make a mind map?",
    "How can I improve my reading speed?", "How do I ask a teacher for help without feeling awkward?",
    "How do I choose what to study at university?",
]
ROLES = [
    ("a friendly librarian", "Recommend me a book for a long train journey."),
    ("an interviewer for a barista job", "Ask me your first three questions, one at a time."),
    ("a personal trainer", "Give me a ten-minute warm-up before a run."),
    ("a tour guide in ancient Rome", "Welcome me to the Colosseum and tell me what happens here."),
    ("a waiter in a French cafe", "Take my order in simple French and translate each line."),
    ("a pirate captain", "Explain to your new crew the rules of the ship."),
    ("a museum guide", "Describe the Mona Lisa to a group of school children."),
    ("a customer support agent for an internet company", "I say my internet is slow. Help me step by step."),
    ("Sherlock Holmes", "Tell me what you can deduce about a person from their muddy shoes."),
    ("a kind teacher", "Explain to me why I got a fraction problem wrong: I said 1/2 + 1/3 = 2/5."),
    ("a shop assistant selling bicycles", "Help me choose between a road bike and a city bike."),
    ("a travel agent", "I want a cheap week somewhere warm in February. What do you suggest?"),
    ("a medieval knight", "Describe your typical day in the castle."),
    ("an astronaut on the International Space Station", "Tell me how you eat and sleep in space."),
    ("a chess coach", "Teach me one simple opening for a beginner."),
    ("a gardener", "Tell me what to plant on a small sunny balcony."),
    ("a news reporter", "Report live on a giant pumpkin contest in a small village."),
    ("my English tutor", "Ask me three questions about my weekend and correct my answers."),
    ("a robot that has just woken up", "Describe what you see in the room around you."),
    ("a detective", "Interview me as a witness to a stolen bicycle."),
]
ROLE_TEMPLATES = ["Pretend you are {r}. {t}", "Act as {r}. {t}", "Let's role-play: you are {r}. {t}"]
JOKE_SUBJECTS = [
    "computers", "cats", "maths teachers", "vegetables", "the weather", "dinosaurs", "coffee", "homework",
    "penguins", "astronauts", "sleepy students", "a confused GPS", "bakers", "pirates", "the moon",
]
RIDDLES = [
    "What has keys but can't open locks?", "What gets wetter the more it dries?",
    "What has a neck but no head?", "I speak without a mouth and hear without ears. What am I?",
    "What can travel around the world while staying in a corner?", "What has many teeth but cannot bite?",
    "The more you take, the more you leave behind. What am I?", "What goes up but never comes down?",
]
MULTI_STEP = [
    "My sister is turning 30 next month and loves hiking and board games. I have about 50 euros. "
    "Suggest three gift ideas and say why each would suit her.",
    "I work from 9 to 5 and get home tired. I want to cook more instead of ordering food. "
    "Plan five quick dinners for next week and write one shopping list for all of them.",
    "I am moving to a new flat on Saturday. I have a car, two friends to help and lots of books. "
    "Make me a checklist for the day, in order.",
    "My neighbour's dog barks every night until midnight. I don't want to start an argument. "
    "How should I bring it up, and what could I say?",
    "I started learning Spanish three months ago and can order food and ask for directions. "
    "What should I focus on next, and how much time should I spend each day?",
    "My ten-year-old son wants a phone because all his friends have one. I am not sure. "
    "What are the pros and cons, and what rules could we agree on?",
    "I have an old laptop that is very slow. I mostly use it for email and watching videos. "
    "What can I try before buying a new one?",
    "Our team of five keeps missing deadlines because tasks are unclear. "
    "Suggest a simple weekly routine to plan and track our work.",
    "I want to run a half marathon in four months. I can run 5 km now. Write a rough weekly plan.",
    "My grandmother is turning 85 and lives in a care home. I want to make her birthday special. "
    "Give me some ideas that don't need much space.",
    "I have a job offer with more money but a longer commute. My current job is fine but boring. "
    "Help me think through the decision with a few questions.",
    "I need to write a speech for my best friend's wedding. We met at school twenty years ago. "
    "Give me an outline with what to say in each part.",
    "I keep forgetting to water my plants and two have already died. "
    "Suggest a few ways to remember and a few plants that forgive forgetting.",
    "We are four adults planning a weekend in the countryside in October. "
    "Suggest activities for the day and for the evenings if it rains.",
    "I'm organising a book club for the first time. Eight people are coming. "
    "How should I run the first meeting?",
    "My teenage daughter wants to start a small business selling bracelets online. "
    "What are the first steps she should take?",
    "I have a presentation at work on Monday and I am very nervous about speaking in front of people. "
    "What can I do over the weekend to prepare?",
    "A friend has asked to borrow a large amount of money. I want to help but I am worried. "
    "How can I think about this and how could I answer?",
    "I want to get my family to use less plastic at home. We are four people with two young children. "
    "Suggest changes that are easy to keep.",
    "I just adopted a rescue cat that hides under the bed all day. How can I help her settle in?",
]

EXPLAIN_TOPICS = [
    "how clouds form", "why we have day and night", "how a seed grows into a plant", "what the ozone layer does",
    "how the pyramids of Egypt were built", "the Vikings", "what the Silk Road was",
    "the first Moon landing in 1969", "the Cold War", "the Aztecs", "the Ice Age",
    "why the dinosaurs died out", "how fossils form", "how rivers shape valleys", "how deserts form",
    "why rainforests matter", "the Amazon river", "the equator", "time zones", "latitude and longitude",
    "the seven continents", "what a glacier is", "how caves form", "the human skeleton", "how muscles work",
    "how our lungs work", "what germs are", "why we need vitamins", "how the ear hears sound",
    "static electricity", "why metal feels colder than wood", "how a magnifying glass works",
    "why the Moon has craters", "what a light year is", "how rockets reach space", "why Mars is red",
    "the life cycle of a butterfly", "how whales breathe", "why zebras have stripes", "how plants drink water",
    "what an ecosystem is", "the ancient Olympic Games", "the invention of writing", "the Magna Carta",
    "the Black Death", "the steam engine", "how women won the right to vote", "the fall of the Berlin Wall",
    "the history of the bicycle", "how a compass works", "why the Dead Sea is so salty", "how coral reefs grow",
    "what the Northern Lights are", "how hurricanes get their names", "how maps are made",
    "why some animals hibernate",
]
EXPLAIN_TEMPLATES = [
    "Explain {} to a seven-year-old.", "I'm a complete beginner. Can you explain {} simply?",
    "Give me three interesting facts about {}.", "Write a short paragraph for a school textbook about {}.",
    "Explain {} in five simple bullet points.", "I never understood {}. Can you explain it step by step?",
]
PEOPLE = [
    "Marie Curie", "Isaac Newton", "Leonardo da Vinci", "Nelson Mandela", "Cleopatra", "Ada Lovelace",
    "Charles Darwin", "Galileo Galilei", "Frida Kahlo", "Mahatma Gandhi", "Mozart", "Florence Nightingale",
    "Rosa Parks", "Genghis Khan", "Albert Einstein",
]
PEOPLE_TEMPLATES = ["Who was {}? Explain it so a child could understand.", "What is {} famous for?",
                    "Tell the life story of {} in one short paragraph."]
TERMS = [
    "opportunity cost", "irony", "alliteration", "an adverb", "a synonym", "an archipelago", "a river delta",
    "an amphibian", "a catalyst", "a molecule", "an isotope", "a hypothesis", "a mortgage", "a dividend", "GDP",
    "a monopoly", "a tariff", "procrastination", "a placebo", "an allergy", "a carbohydrate", "an algorithm",
    "bandwidth", "a firewall", "a browser cookie", "a pixel", "a sonnet", "a protagonist", "a fable",
    "a chord in music", "tempo", "a primary source", "a census", "a treaty", "biodiversity", "erosion",
    "a food desert", "a carbon footprint", "nostalgia", "a paradox",
]
TERM_TEMPLATES = ["Define {} in one sentence, then give an example.", "What is meant by {}? Answer in two sentences."]
DIFFERENCES = [
    ("an adjective", "an adverb"), ("a noun", "a pronoun"), ("its", "it's"), ("fewer", "less"), ("who", "whom"),
    ("latitude", "longitude"), ("an island", "a peninsula"), ("a river", "a stream"), ("a typhoon", "a cyclone"),
    ("an atom", "a molecule"), ("an element", "a compound"), ("a conductor", "an insulator"),
    ("AC", "DC electricity"), ("a vein", "an artery"), ("an allergy", "an intolerance"),
    ("aerobic", "anaerobic exercise"), ("a stock", "a bond"), ("gross income", "net income"),
    ("HTTP", "HTTPS"), ("a function", "a method"), ("a library", "a framework"), ("SQL", "NoSQL databases"),
    ("a URL", "a domain name"), ("Wi-Fi", "the internet"), ("a CPU", "a GPU"),
    ("machine learning", "artificial intelligence"), ("a bit", "a byte"), ("a novel", "a novella"),
    ("a biography", "an autobiography"), ("a violin", "a viola"), ("a herb", "a spice"),
    ("a sweet potato", "a yam"), ("jam", "jelly"), ("espresso", "filter coffee"), ("a republic", "a kingdom"),
    ("a dolphin", "a porpoise"), ("a moth", "a butterfly"), ("a bee", "a wasp"), ("an ape", "a monkey"),
    ("a recession", "a depression"), ("a lawyer", "a judge"), ("a cello", "a double bass"),
]
DIFFERENCE_TEMPLATES = [
    "What is the difference between {a} and {b}?", "How is {a} different from {b}? Give one example of each.",
    "People often mix up {a} and {b}. How can I tell them apart?",
]
LISTS = [
    "animals that live in the Arctic", "inventions that changed the world", "famous paintings and who painted them",
    "rivers in Africa", "instruments in an orchestra", "vegetables that grow well in pots",
    "words that rhyme with 'light'",
    "synonyms for 'happy'", "common mistakes people make when learning English",
    "programming languages and what each is mostly used for", "things to check before buying a used bicycle",
    "ways to reuse glass jars", "questions to ask a doctor at a check-up", "breakfast dishes from around the world",
    "famous scientists and what they discovered", "signs that a houseplant needs more light",
    "wonders of the ancient world", "Greek gods and what they ruled over", "fruits that are high in vitamin C",
    "safety rules for a school chemistry lab", "jobs that did not exist twenty years ago", "Olympic sports",
    "countries in South America and their capitals", "birds you might see in a city park",
    "things every student should have in their backpack", "kitchen tools a beginner cook needs",
    "classic novels that are good for teenagers", "ways to be kind to a new colleague",
    "ways to save water at home", "mammals that can swim", "symptoms of dehydration",
    "famous bridges and where they are", "habits of people who sleep well", "words borrowed into English from French",
]
LIST_TEMPLATES = ["List {n} {x}.", "Name {n} {x}, with one sentence about each."]
REASONS = [
    "people learn to play an instrument", "cities build bike lanes", "forests matter for the climate",
    "the Titanic sank", "bees are important", "people keep diaries", "we should learn history",
    "many people enjoy gardening", "breakfast is called the most important meal", "the Roman Empire lasted so long",
    "people move to big cities", "children should learn to swim", "it is good to read before bed",
    "companies use open-source software", "the Internet changed how we work", "volunteering is worthwhile",
]
DEBATES = [
    "school uniforms", "a four-day working week", "banning cars from city centres", "homework for young children",
    "working from home", "electric scooters in cities", "learning Latin at school", "zoos",
    "changing the clocks twice a year", "paying children for chores", "social media for teenagers",
    "self-driving cars", "spending money on space exploration", "tipping in restaurants", "nuclear power",
]

NEW_PASSAGES = [
    "The local swimming pool will close for repairs from the first of March until the end of April. During this "
    "time, members can use the pool in the next town for free by showing their membership card.",
    "Octopuses have three hearts and blue blood. They can change the colour and texture of their skin in less than "
    "a second, which helps them hide from predators and sneak up on prey.",
    "Our online shop now offers free delivery on orders over thirty dollars. Orders placed before two in the "
    "afternoon are sent the same day, and returns are free for thirty days.",
    "The first bicycles had no pedals. Riders pushed themselves along with their feet. Pedals were added in the "
    "1860s, and the chain-driven bicycle we know today appeared about twenty years later.",
    "Please remember that the office kitchen is shared. Wash your cups after use, label your food in the fridge, "
    "and throw away anything that is older than a week every Friday afternoon.",
    "Mount Everest grows by a few millimetres every year because the Indian plate is still pushing into Asia. "
    "Climbers who reach the top stay only a short time, because the air has a third of the oxygen at sea level.",
    "so yesterday i went to the new pizza place on main street and honestly the pizza was amazing but we waited "
    "like 45 minutes and the music was way too loud",
    "The volunteer group met on Sunday to clean the beach. Twenty-three people collected forty bags of rubbish, "
    "mostly plastic bottles and fishing nets. The next clean-up is planned for the first Sunday of next month.",
    "Sleep is when the body repairs muscles and the brain sorts the memories of the day. Adults who sleep less "
    "than six hours a night for long periods are more likely to get ill and find it harder to concentrate.",
    "The train to the airport is delayed by about twenty minutes because of a signal problem near the central "
    "station. Passengers with tight connections are advised to take the express bus from platform four.",
    "Marie worked as a nurse for thirty years before she retired. Now she teaches first aid to teenagers at the "
    "community centre every Tuesday evening, and many of her students say it is their favourite class.",
    "Tomatoes need at least six hours of sun a day. Water them deeply twice a week rather than a little every day, "
    "and tie the stems to a stick as they grow so they do not bend under the weight of the fruit.",
    "Dear customers, from next Monday our opening hours will change. We will open at eight instead of nine, and "
    "close at six instead of seven. Sunday opening hours stay the same.",
    "The Moon is slowly moving away from Earth, by about four centimetres every year. Millions of years ago, days "
    "on Earth were shorter because the planet spun faster.",
    "Hi all, quick reminder that the quarterly reports are due on Friday. Please use the new template in the shared "
    "folder, and send your draft to Tom by Wednesday so he has time to check the numbers.",
    "Recycling one aluminium can saves enough energy to run a television for three hours. Aluminium can be "
    "recycled again and again without losing quality, which makes it one of the most useful materials to recycle.",
    "The school football team won the regional final on Saturday after a penalty shoot-out. The coach said the "
    "players had trained every morning before class for the whole season.",
    "Our new coffee maker brews a full pot in four minutes, keeps it warm for two hours and switches itself off "
    "to save energy. The water tank can be removed for easy filling.",
]
NEW_PASSAGE_TASKS = [
    "Write three questions a teacher could ask about the following text:",
    "List the key facts in the following text:", "What is the main idea of the following text?",
    "Rewrite the following text as a short social media post:", "Rewrite the following text in the first person:",
    "Give the following text a title and a one-line summary:", "Explain the following text to a ten-year-old:",
    "Turn the following text into a short dialogue between two people:",
    "Rewrite the following text in a friendly, casual tone:",
]
BAD_SENTENCES = [
    "Me and him goes to the park every day.", "She don't like coffee in the morning.",
    "Their coming over later tonight.",
    "I seen that film last week.", "Whose going to the party on Saturday?", "The dog wagged it's tail.",
    "I could of helped you if you asked.", "There is less people here than yesterday.",
    "He runned all the way to the shop.", "Between you and I, this plan is a bad idea.",
    "We was late for school again.",
    "She is more taller than her sister.", "I has finished my homework.", "The childrens are playing outside.",
    "Your welcome to join us for dinner.", "Neither of the answers are correct.", "He didn't do nothing wrong.",
    "I am living here since 2015.", "She told to me a secret.", "The informations are on the website.",
    "I look forward to hear from you.", "He go to work by bus every days.", "I didn't knew the answer.",
    "Despite of the rain, we went for a walk.", "She explained me the problem.", "Can you borrow me your pen?",
    "If I would have known, I would have come.", "Everyone have to bring their own lunch.",
    "The book who I read was very long.", "We discussed about the plan for hours.",
]
GRAMMAR_TEMPLATES = [
    "Fix the grammar in this sentence: \"{}\"",
    "Is this sentence correct? If not, fix it and explain the mistake: \"{}\"",
]
CHANGE_SENTENCES = [
    ("Turn this sentence into a question:", ["She has finished the report.", "The shop opens at nine.",
                                             "They are moving to Canada next year."]),
    ("Make this request more polite:", ["Send me the file now.", "Move your car.", "Tell me when the bus comes.",
                                        "Give me a table for two."]),
    ("Rewrite this sentence in the future tense:", ["I walk to school with my friends.",
                                                    "We planted tomatoes in the garden."]),
    ("Combine these two sentences into one:", ["It was raining. We went for a walk anyway.",
                                               "My phone is old. It still works well."]),
    ("Add the missing punctuation to this sentence:", ["where are you going asked Tom",
                                                       "we need eggs milk bread and butter",
                                                       "i cant believe its already december"]),
    ("Split this long sentence into shorter ones:", [
        "I went to the shop to buy milk but they had run out so I went to another shop which was closed and in "
        "the end I had to drink my coffee black which I don't like."]),
    ("Make this sentence more vivid:", ["The dog ran across the field.", "The room was messy."]),
]

DATA_TASKS = [
    "Write a JSON object that describes a book with a title, an author, a year and a list of genres.",
    "Write a JSON array of three users, each with an id, a name and an email address.",
    "Write a YAML configuration file for a web server with a host, a port and a list of allowed origins.",
    "Write a YAML file that lists three cities with their country and population.",
    "Write a small CSV file of five students with their name, age and grade.",
    "Write a JSON schema for a product with a name, a price above zero and an optional description.",
    "Write a docker-compose.yml file that runs a web app and a PostgreSQL database.",
    "Write a GitHub Actions workflow in YAML that runs pytest on every push.",
    "Convert this CSV into JSON:\n\n```\nname,age,city\nAna,31,Lisbon\nBen,25,Leeds\nCarla,40,Madrid\n```",
    "Convert this JSON into YAML:\n\n```json\n{\"server\": {\"host\": \"localhost\", \"port\": 8080}, "
    "\"debug\": true, \"users\": [\"ana\", \"ben\"]}\n```",
    "Convert this YAML into JSON:\n\n```yaml\ntitle: Shopping list\nitems:\n  - milk\n  - eggs\n  - bread\n"
    "budget: 20\n```",
    "What is wrong with this JSON?\n\n```json\n{\"name\": \"Ana\", \"age\": 31, "
    "\"hobbies\": [\"chess\", \"tennis\",]}\n```",
    "What is wrong with this JSON?\n\n```json\n{'id': 1, 'active': True}\n```",
    "Write a Python function that reads a YAML file and returns it as a dictionary.",
    "Write a Python function that converts a list of dictionaries into a CSV string.",
    "Write a Python script that reads a JSON file of orders and prints the total amount.",
    "Explain the difference between JSON and YAML, with a short example of each.",
    "What is a CSV file and when is it a good choice for storing data?",
]
REGEXES = [
    "a UK postcode", "a date in the format DD/MM/YYYY", "a hex colour such as #1a2b3c", "a time in 24-hour format",
    "a word that starts with a capital letter", "a URL that starts with https",
    "an integer with an optional minus sign",
    "a price with exactly two decimal places", "a line that ends with a semicolon", "a repeated word such as 'the the'",
    "a hashtag", "a username of 3 to 16 letters, digits or underscores", "a five-digit ZIP code",
    "a file name that ends in .jpg or .png",
]
EXPLAIN_REGEXES = [r"^\d{3}-\d{4}$", r"[A-Z][a-z]+", r"^\s*$", r"(\w+)@(\w+)\.com", r"\b\d+(\.\d+)?\b",
                   r"^#[0-9a-fA-F]{6}$", r"colou?r", r"^(?=.*\d).{8,}$"]
WEB_TASKS = [
    "Write an HTML page with a heading, a short paragraph and a list of three favourite foods.",
    "Write an HTML contact form with a name, an email address, a message box and a send button.",
    "Write an HTML table that shows a weekly timetable with five days and three lessons a day.",
    "Write an HTML page with a navigation bar linking to Home, About and Contact.",
    "Write the HTML for an image with a caption underneath it.",
    "Write an HTML page with a button that shows an alert saying hello when it is clicked.",
    "Write CSS that centres a box horizontally and vertically on the page.",
    "Write CSS that makes a button change colour when the mouse is over it.",
    "Write CSS for a simple card with rounded corners and a soft shadow.",
    "Write CSS that shows three columns on wide screens and one column on phones.",
    "Write CSS that makes every link in a page green and removes the underline.",
    "Write CSS for a sticky header that stays at the top when the page scrolls.",
    "Write an HTML and CSS page for a simple personal profile with a photo, a name and a short bio.",
    "Write a small HTML page with JavaScript that counts how many times a button has been clicked.",
]
JS_TASKS = [
    "shuffles an array", "deep copies an object", "converts a string to camelCase",
    "counts down from ten in the console, one number per second",
    "checks that a password has at least eight characters and one digit",
    "toggles a CSS class on an element when a button is clicked", "sorts an array of objects by a date field",
    "formats a number as a price in euros", "reads the query parameters of the current URL into an object",
    "saves a value in localStorage and reads it back", "checks whether an object has no keys",
    "returns the number of days between two dates", "memoises another function",
    "picks a random element from an array", "turns an array of pairs into an object",
]
SQL_SCHEMA = "a table orders(id, customer_id, amount, created_at) and a table customers(id, name, country)"
SQL_TASKS = [
    "returns the total amount of orders per country", "lists the customers who have never placed an order",
    "finds the largest single order of each customer", "counts the orders placed in the last seven days",
    "returns the three countries with the most customers", "shows each customer's first order date",
    "deletes the orders with an amount of zero", "returns the average order amount per month",
]
SQL_QUESTIONS = [
    "What is the difference between WHERE and HAVING in SQL?", "What does a LEFT JOIN do? Give a small example.",
    "What is a primary key?", "What is a foreign key in SQL?", "How do I add a new column to an existing SQL table?",
    "What does GROUP BY do in SQL?", "What is the difference between DELETE and TRUNCATE?",
]
SHELL_ONELINERS = [
    "renames every .jpeg file in a folder to .jpg", "shows the five commands I use most from my bash history",
    "counts the unique IP addresses in an access log", "finds every file under the current folder that contains TODO",
    "replaces 'colour' with 'color' in all .md files", "prints the tenth line of a file",
    "shows which process is listening on port 8080", "lists the subfolders sorted by their size",
    "counts the files in each subfolder", "follows a log file as new lines are added",
    "prints the second column of a CSV file", "sorts a file and removes duplicate lines",
    "converts a file's line endings from Windows to Unix", "creates ten empty files called note1.txt to note10.txt",
    "shows the disk space left on every drive in human-readable units",
]
EXPLAIN_COMMANDS = [
    "ls -la | grep '^d'", "du -sh * | sort -h", "find . -name '*.log' -mtime +7 -delete",
    "grep -rn 'import os' --include='*.py' .", "tar -czf backup.tar.gz ~/documents",
    "ps aux | sort -nrk 3 | head -5", "cat data.csv | cut -d, -f1 | sort | uniq -c", "chmod +x run.sh && ./run.sh",
    "git log --oneline --graph -10", "curl -s https://example.com | wc -c",
]
TESTED_FUNCTIONS = [
    "def slugify(title):\n    return '-'.join(title.lower().split())",
    "def clamp(x, low, high):\n    return max(low, min(x, high))",
    "def is_valid_username(name):\n    return 3 <= len(name) <= 16 and name.isalnum()",
    "def word_count(text):\n    return len(text.split())",
    "def discount(price, percent):\n    if not 0 <= percent <= 100:\n        raise ValueError('bad percent')\n"
    "    return round(price * (1 - percent / 100), 2)",
    "def initials(full_name):\n    return ''.join(part[0].upper() for part in full_name.split())",
    "def parse_version(s):\n    return tuple(int(p) for p in s.split('.'))",
    "def chunk(xs, size):\n    return [xs[i:i + size] for i in range(0, len(xs), size)]",
    "def grade(score):\n    if score >= 90:\n        return 'A'\n    if score >= 75:\n        return 'B'\n"
    "    if score >= 50:\n        return 'C'\n    return 'F'",
    "def safe_divide(a, b):\n    if b == 0:\n        return None\n    return a / b",
]
TEST_TEMPLATES = [
    "Write pytest unit tests for this function:\n\n```python\n{}\n```",
    "Write unit tests with the unittest module for this function, including edge cases:\n\n```python\n{}\n```",
]
BUGGY = [
    ("return the average of a list", "it crashes on an empty list",
     "def average(xs):\n    return sum(xs) / len(xs)"),
    ("add an item to a new list each time", "items from earlier calls keep appearing",
     "def add_item(item, items=[]):\n    items.append(item)\n    return items"),
    ("print the numbers from 1 to 10", "it stops at 9", "for i in range(1, 10):\n    print(i)"),
    ("remove the even numbers from a list", "some even numbers are left",
     "nums = [2, 4, 5, 6, 8]\nfor n in nums:\n    if n % 2 == 0:\n        nums.remove(n)\nprint(nums)"),
    ("ask for the user's age and add one", "it raises a TypeError",
     "age = input('Age: ')\nprint('Next year you will be', age + 1)"),
    ("return the largest number in a list", "it returns the wrong value for negative numbers",
     "def largest(xs):\n    best = 0\n    for x in xs:\n        if x > best:\n            best = x\n    return best"),
    ("count the words in a sentence", "it always returns None",
     "def count_words(s):\n    n = len(s.split())"),
    ("check whether a word is in a list, ignoring case", "it misses 'Apple' when looking for 'apple'",
     "def contains(words, w):\n    return w in words"),
    ("build a greeting", "it prints the braces instead of the name",
     "name = 'Ana'\nprint('Hello, {name}!')"),
    ("read all lines of a file", "it only prints the first line",
     "with open('notes.txt') as f:\n    line = f.readline()\n    print(line)"),
    ("sum the numbers from 1 to n", "the result is too small",
     "def total(n):\n    s = 0\n    for i in range(n):\n        s += i\n    return s"),
    ("copy a list and change the copy", "the original list changes too",
     "a = [1, 2, 3]\nb = a\nb.append(4)\nprint(a)"),
    ("compute the price with tax", "it sometimes prints 10.799999999",
     "price = 9\nprint(price * 1.2)"),
    ("check whether a number is between 1 and 10", "it is always True",
     "def in_range(x):\n    return 1 <= x or x <= 10"),
]
JS_BUGGY = [
    ("print the numbers 0, 1 and 2 after one second", "it prints 3 three times",
     "for (var i = 0; i < 3; i++) {\n  setTimeout(() => console.log(i), 1000);\n}"),
    ("check whether the input is the number 5", "it is true for the string '5' as well",
     "function isFive(x) {\n  return x == 5;\n}"),
    ("add up the numbers in an array", "it returns a string like '0123'",
     "const nums = ['1', '2', '3'];\nlet total = 0;\nfor (const n of nums) total += n;\nconsole.log(total);"),
]
ERRORS = [
    "TypeError: can only concatenate str (not \"int\") to str", "IndexError: list index out of range",
    "KeyError: 'name'", "ModuleNotFoundError: No module named 'requests'",
    "AttributeError: 'NoneType' object has no attribute 'split'", "IndentationError: expected an indented block",
    "ZeroDivisionError: division by zero", "UnboundLocalError: local variable 'count' referenced before assignment",
    "RecursionError: maximum recursion depth exceeded",
    "FileNotFoundError: [Errno 2] No such file or directory: 'data.csv'",
]
PY_SCRIPTS = [
    "asks for the user's name and age and prints the year they will turn 100",
    "renames all files in a folder to lowercase", "plays a number-guessing game with the user",
    "prints a multiplication table from 1 to 10 as a grid", "counts how often each letter appears in a text file",
    "finds all duplicate files in a folder by comparing their contents",
    "draws a simple bar chart of monthly sales with matplotlib",
    "reads a CSV of expenses and prints the total per category",
    "checks every minute whether a website is up and prints the time when it is down",
    "makes a simple to-do list that is saved in a text file between runs",
    "converts every .png image in a folder to .jpg using Pillow", "prints a random motivational quote from a list",
]
CODE_CONCEPTS = [
    "What is the difference between a GET and a POST request?", "What is JSON and why is it used so much?",
    "What does the CSS box model mean?", "What is the DOM in web development?", "What is an environment variable?",
    "What is the difference between an array and a linked list?", "What is a pointer in C?",
    "What does async/await do in JavaScript?", "What is version control and why should I use it?",
    "What is a Docker container?", "What is the difference between a unit test and an integration test?",
    "What is an off-by-one error?", "What is the difference between HTML and CSS?", "What does a linter do?",
    "What is a pull request?", "What is the difference between a syntax error and a logic error?",
    "What is pip and how do I use it?", "What is a command-line argument?",
]

CONVERSIONS = [
    ("kilometres", "miles", [5, 10, 21, 42, 100]), ("miles", "kilometres", [3, 26, 60]),
    ("kilograms", "pounds", [2, 15, 70]), ("pounds", "kilograms", [10, 150]), ("litres", "millilitres", [1.5, 3, 0.25]),
    ("degrees Celsius", "degrees Fahrenheit", [0, 25, 37, -10]), ("degrees Fahrenheit", "degrees Celsius", [50, 98.6,
    212]),
    ("metres", "feet", [2, 100]), ("inches", "centimetres", [12, 30]), ("hours", "seconds", [2, 5]),
    ("days", "hours", [3, 14]), ("gigabytes", "megabytes", [2, 16]), ("kilometres per hour", "metres per second", [36,
    90]),
    ("square metres", "square centimetres", [3, 12]), ("grams", "kilograms", [750, 2500]), ("weeks", "days", [6, 52]),
    ("cups", "millilitres", [2, 3]), ("feet", "metres", [6, 1000]),
]
CONVERSION_TEMPLATES = ["Convert {n} {a} to {b}.", "How many {b} are in {n} {a}?"]
STEP_SUFFIXES = ["", " Explain each step.", " Work it out step by step.", " Check your answer at the end."]
MATH_CONCEPTS = [
    "Why can't we divide by zero?", "What is a negative number? Give a real-life example.",
    "How can I work out a percentage of a number in my head?", "What is the order of operations in maths?",
    "How do I quickly work out a 15 percent tip?", "What is a ratio? Give an everyday example.",
    "Explain what an exponent is.", "What is the difference between area and perimeter?",
    "How do you round a number to the nearest hundred?", "What is a right angle?",
    "How do I turn a decimal into a fraction?", "What is pi and why is it important?",
    "How do I find the lowest common denominator of two fractions?",
    "What is the difference between odd and even numbers?",
    "How do I work out the average speed of a journey with two parts?", "What is a square number?",
]


def math_extra(rng: random.Random) -> list[str]:
    out = []
    step = lambda: rng.choice(STEP_SUFFIXES)  # noqa: E731
    for a, b, values in CONVERSIONS:
        out += [rng.choice(CONVERSION_TEMPLATES).format(n=n, a=a, b=b) for n in values]
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
    return out + MATH_CONCEPTS


DIALOGUES = [
    ("a customer", "a shop assistant", "returning a jumper that is too small"),
    ("two friends", "", "choosing a film to watch tonight"), ("a child", "a grandparent",
    "what school was like long ago"),
    ("a doctor", "a patient", "a sore knee after running"), ("a cat", "a dog", "who is the better pet"),
    ("two astronauts", "", "the first morning on Mars"), ("a tourist", "a local", "directions to the train station"),
    ("a teacher", "a student", "a missing homework assignment"), ("a chef", "a food critic", "a very salty soup"),
    ("two neighbours", "", "a tree that blocks the light"), ("a job applicant", "an interviewer",
    "their biggest weakness"),
    ("a robot", "its inventor", "why it wants a day off"), ("a barista", "a sleepy customer",
    "a complicated coffee order"),
    ("two squirrels", "", "where they hid their nuts"), ("a parent", "a teenager", "the rules for a first party"),
]
LETTERS = [
    "a letter of complaint to an airline about a lost suitcase", "a cover letter for a part-time job at a bookshop",
    "a letter to my future self to open in ten years", "a letter to a pen pal in Japan introducing myself",
    "a reference letter for a former student who is applying to university", "a resignation letter that stays friendly",
    "a letter to the town council asking for a pedestrian crossing near a school",
    "a letter to a favourite author telling them what their book meant to me",
    "a letter from a child to the tooth fairy", "a thank-you letter to a host family after a language exchange",
    "a formal letter asking a bank to close my account", "a letter to a new neighbour welcoming them to the street",
    "a letter to a local newspaper about the lack of parks in my area",
    "an apology letter to a customer for a late delivery",
    "a letter to my grandmother describing my first week at university",
]
PRODUCTS = [
    "a solar-powered phone charger", "a bamboo toothbrush", "a noise-cancelling sleep mask", "a foldable electric bike",
    "a smart plant pot that reminds you to water", "a handmade ceramic mug", "a waterproof hiking jacket",
    "a children's book about space", "a mechanical keyboard", "an organic lavender soap", "a cast-iron frying pan",
    "a yoga mat made of cork", "a language-learning app", "a weekend cooking class", "a hand-knitted wool scarf",
    "a portable camping stove", "a set of reusable beeswax food wraps", "a pair of wireless earbuds",
]
PRODUCT_TEMPLATES = [
    "Write a product description for {} for an online shop, in under 80 words.",
    "Write three short taglines for {}.", "Write a customer review of {} that mentions one good and one bad thing.",
    "Write a short advert for {} aimed at students.",
]
FABLE_MORALS = [
    "patience", "honesty", "sharing", "listening to others", "not judging by appearances", "hard work",
    "keeping promises", "being brave when you are afraid", "asking for help", "saying sorry",
]
DIARY_ENTRIES = [
    "a sailor on the first day of a long voyage", "a cat that has just moved house",
    "a girl on her first day at a new school",
    "an explorer lost in a jungle", "a lighthouse keeper during a storm", "a snowman on the first warm day of spring",
    "a teenager in the year 2100", "a tree in a city park", "a dog waiting for its owner to come home",
]
PLACES = [
    "a busy market in the morning", "a quiet forest after the rain", "a train station at midnight",
    "a kitchen on a holiday morning", "a beach in winter", "a school playground at break time",
    "a small bookshop on a snowy day", "a mountain hut at sunset", "a city rooftop on a summer night",
]
ACROSTIC_WORDS = ["SPRING", "OCEAN", "FRIEND", "COFFEE", "GARDEN", "MUSIC", "DREAM", "WINTER"]
COUPLETS = [
    "a lazy Sunday", "a broken umbrella", "a cup of hot chocolate", "a sleepy owl", "a train leaving the station",
    "a kite in the wind", "a forgotten birthday", "a first bicycle ride",
]
RIDDLE_ANSWERS = ["a shadow", "an echo", "a candle", "a clock", "a river", "the letter E", "a map", "an egg",
                  "a cloud", "a key"]


def story_extra(rng: random.Random) -> list[str]:
    out = []
    for a, b, topic in DIALOGUES:
        who = f"{a} and {b}" if b else a
        out.append(f"Write a short dialogue between {who} about {topic}.")
    out += [f"Write {x}." for x in LETTERS]
    out += [t.format(p) for p in PRODUCTS for t in rng.sample(PRODUCT_TEMPLATES, 2)]
    out += [f"Write a short fable with animals that teaches a lesson about {m}." for m in FABLE_MORALS]
    out += [f"Write a diary entry by {x}." for x in DIARY_ENTRIES]
    out += [f"Describe {p} using all five senses." for p in PLACES]
    out += [f"Write an acrostic poem using the word {w}." for w in ACROSTIC_WORDS]
    out += [f"Write a rhyming couplet about {x}." for x in COUPLETS]
    out += [f"Write a riddle whose answer is {x}." for x in RIDDLE_ANSWERS]
    return out


def compose_extra(rng: random.Random) -> list[dict]:
    rows: list[tuple[str, str]] = []
    rows += [("chat", t.format(d, n=rng.randint(2, 6))) for d in DISHES for t in rng.sample(RECIPE_TEMPLATES, 2)]
    for _ in range(20):
        a, b, c = rng.sample(INGREDIENTS, 3)
        rows.append(("chat", f"I have {a}, {b} and {c} at home. What could I make for dinner?"))
    rows += [("chat", t.format(c=c, n=rng.randint(2, 5))) for c in CITIES for t in rng.sample(CITY_TEMPLATES, 2)]
    rows += [("chat", q) for q in COOKING_QUESTIONS + TRAVEL_QUESTIONS + HEALTH_QUESTIONS + MONEY_QUESTIONS
             + STUDY_QUESTIONS + MULTI_STEP]
    rows += [("chat", rng.choice(ROLE_TEMPLATES).format(r=r, t=t)) for r, t in ROLES]
    rows += [("chat", f"Tell me a {rng.choice(['short', 'silly', 'clean'])} joke about {s}.") for s in JOKE_SUBJECTS]
    rows += [("chat", f"Here is a riddle: {r} Give the answer and explain it.") for r in RIDDLES]
    rows += [("explain", t.format(x)) for x in EXPLAIN_TOPICS for t in rng.sample(EXPLAIN_TEMPLATES, 2)]
    rows += [("explain", rng.choice(PEOPLE_TEMPLATES).format(p)) for p in PEOPLE]
    rows += [("explain", rng.choice(TERM_TEMPLATES).format(t)) for t in TERMS]
    rows += [("explain", rng.choice(DIFFERENCE_TEMPLATES).format(a=a, b=b)) for a, b in DIFFERENCES]
    rows += [("explain", rng.choice(LIST_TEMPLATES).format(n=rng.choice(["three", "five", "seven"]), x=x))
             for x in LISTS]
    rows += [("explain", f"Give {rng.choice(['two', 'three', 'four'])} reasons why {r}.") for r in REASONS]
    rows += [("explain", f"Give two arguments for and two against {d}.") for d in DEBATES]
    rows += [("rewrite", f"{task}\n\n\"{p}\"") for p in NEW_PASSAGES for task in rng.sample(NEW_PASSAGE_TASKS, 3)]
    rows += [("rewrite", rng.choice(GRAMMAR_TEMPLATES).format(s)) for s in BAD_SENTENCES]
    rows += [("rewrite", f"{task} \"{s}\"") for task, sentences in CHANGE_SENTENCES for s in sentences]
    rows += [("code", t) for t in DATA_TASKS + WEB_TASKS + SQL_QUESTIONS + CODE_CONCEPTS]
    rows += [("code", f"Write a regular expression that matches {r}, and explain each part.") for r in REGEXES]
    rows += [("code", f"Explain what this regular expression matches: `{r}`") for r in EXPLAIN_REGEXES]
    rows += [("code", f"Write a JavaScript function that {t}.") for t in JS_TASKS]
    rows += [("code", f"Given {SQL_SCHEMA}, write a SQL query that {t}.") for t in SQL_TASKS]
    rows += [("code", f"Give me a shell one-liner that {t}.") for t in SHELL_ONELINERS]
    rows += [("code", f"Explain what this shell command does: `{c}`") for c in EXPLAIN_COMMANDS]
    rows += [("code", rng.choice(TEST_TEMPLATES).format(f)) for f in TESTED_FUNCTIONS]
    rows += [("code", f"This Python code should {goal}, but {bug}. Find the bug and fix it:\n\n```python\n{c}\n```")
             for goal, bug, c in BUGGY]
    rows += [("code", f"This JavaScript should {goal}, but {bug}. Why, and how do I fix it?\n\n```javascript\n{c}\n```")
             for goal, bug, c in JS_BUGGY]
    rows += [("code", f"What does this Python error mean and how do I fix it?\n\n{e}") for e in ERRORS]
    rows += [("code", f"Write a Python script that {t}.") for t in PY_SCRIPTS]
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
    main()
