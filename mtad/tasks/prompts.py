"""Varied chat prompts: the chat task's held-out prompts, and the chat text drafts are distilled on.

Prompts are built from templates x topics, covering the kinds of text the suite decodes
(explanations, writing, code, SQL over made-up schemas, summaries, translation, maths,
conversation) without touching any evaluation set (Spider, CNN/DailyMail, MT-Bench,
HumanEval). Topics are split deterministically: a topic is either for training or held
out, never both, so held-out prompts (the chat task, `mtad.tasks.chat`; draft measurement and
the bench) share no subject with the training text (`mtad.tasks.heldout.sources`).
"""

from __future__ import annotations

import random

import torch

from mtad import split

TOPICS = [
    "volcanoes",
    "the French Revolution",
    "photosynthesis",
    "black holes",
    "coffee",
    "the stock market",
    "machine learning",
    "honeybees",
    "the Roman Empire",
    "climate change",
    "jazz music",
    "the human heart",
    "electric cars",
    "chess",
    "the Great Wall of China",
    "vaccines",
    "the moon landing",
    "rainforests",
    "cryptography",
    "the Olympic Games",
    "sleep",
    "plate tectonics",
    "the printing press",
    "octopuses",
    "renewable energy",
    "ancient Egypt",
    "the immune system",
    "quantum computing",
    "gardening",
    "bread baking",
    "the water cycle",
    "social media",
    "dinosaurs",
    "the Renaissance",
    "marathon running",
    "recycling",
    "the internet",
    "earthquakes",
    "meditation",
    "the solar system",
    "urban planning",
    "wolves",
    "the Industrial Revolution",
    "nutrition",
    "public libraries",
    "glaciers",
    "video games",
    "bicycles",
    "the history of money",
    "coral reefs",
    "artificial satellites",
    "the Silk Road",
    "mushrooms",
    "poetry",
    "airplanes",
    "DNA",
    "inflation",
    "the Amazon river",
    "time zones",
    "penguins",
    "origami",
    "tea",
    "the printing of newspapers",
    "hurricanes",
    "robots",
    "the Moon's phases",
    "migration of birds",
    "elections",
    "antibiotics",
    "the piano",
    "deserts",
    "submarines",
    "friendship",
    "job interviews",
    "remote work",
    "learning a language",
    "public speaking",
    "saving money",
    "camping",
    "photography",
    "the Eiffel Tower",
    "football",
    "volunteering",
    "recipes for soup",
    "time management",
    "smartphones",
    "trains",
    "museums",
    "ocean tides",
    "lightning",
    "the Vikings",
    "spiders",
    "cheese making",
    "wind turbines",
    "the periodic table",
    "traffic jams",
    "city parks",
    "solar panels",
    "libraries of code",
]

NAMES = ["Alice", "Bob", "Carla", "Dmitri", "Elena", "Farid", "Grace", "Hiro", "Ines", "Jonas", "Kemi", "Luis"]

TEMPLATES = [
    "Explain {topic} to a ten-year-old.",
    "Write a short essay about {topic}.",
    "What are three surprising facts about {topic}?",
    "Give me a step-by-step guide related to {topic}.",
    "Write a short poem about {topic}.",
    "Write a short story in which {name} learns about {topic}.",
    "Write a professional email from {name} asking a colleague for help with a project on {topic}.",
    "What are the pros and cons of {topic}?",
    "Write a news article about a recent discovery concerning {topic}.",
    "Summarize the main ideas of {topic} in five bullet points.",
    "Compose a dialogue between {name} and a teacher about {topic}.",
    "Translate into French: 'I would like to learn more about {topic} this year.'",
    "Translate into German: 'My friend {name} gave a talk about {topic} yesterday.'",
    "Write a blog post introduction about {topic}.",
    "What questions should I ask an expert on {topic}?",
    "Describe the history of {topic} in a paragraph.",
    "Create a quiz with three questions about {topic}, with answers.",
    "As a travel guide, describe a trip that involves {topic}.",
    "Give me advice for a beginner interested in {topic}.",
    "Write a persuasive paragraph arguing that {topic} deserves more attention.",
]

CODE_TASKS = [
    "reverses the words in a sentence",
    "counts the vowels in a string",
    "returns the n-th Fibonacci number",
    "checks whether a number is prime",
    "merges two sorted lists",
    "removes duplicates from a list while keeping order",
    "computes the average of a list of numbers",
    "finds the longest word in a text",
    "converts Celsius to Fahrenheit",
    "flattens a nested list",
    "checks whether a string is a palindrome",
    "returns the factorial of n",
    "groups words by their first letter",
    "computes the greatest common divisor of two integers",
    "parses a date string in the form YYYY-MM-DD",
    "rotates a list by k positions",
    "counts word frequencies in a text",
    "returns the second largest number in a list",
    "validates an email address with a regular expression",
    "transposes a matrix given as a list of lists",
    "computes the running sum of a list",
    "sorts a list of tuples by the second item",
    "finds all pairs in a list that sum to a target",
    "converts a Roman numeral to an integer",
    "chunks a list into pieces of size n",
]

CODE_TEMPLATES = [
    "Write a Python function that {task}.",
    "Write a Python function that {task}. Include a docstring and a short example.",
    'Complete this Python function:\n\ndef solve(data):\n    """Function that {task}."""\n',
    "Write a JavaScript function that {task}.",
    "How would you write code that {task}? Explain briefly, then give Python code.",
]

SQL_TABLES = [
    ("employees", ["id", "name", "department", "salary", "hire_year"]),
    ("books", ["id", "title", "author", "year", "price"]),
    ("orders", ["id", "customer_id", "amount", "order_date", "status"]),
    ("students", ["id", "name", "age", "major", "gpa"]),
    ("flights", ["id", "origin", "destination", "duration", "airline"]),
    ("movies", ["id", "title", "director", "release_year", "rating"]),
    ("products", ["id", "name", "category", "price", "stock"]),
    ("players", ["id", "name", "team", "position", "goals"]),
]

SQL_QUESTIONS = [
    "How many rows are in the table?",
    "List all {c1} values sorted in descending order of {c2}.",
    "What is the average {c2}?",
    "Show the {c1} of entries where {c2} is greater than 10.",
    "Count the entries for each {c1}.",
    "Which {c1} has the largest {c2}?",
    "List distinct {c1} values.",
]


def _split(items: list[str], held_out: bool) -> list[str]:
    return [t for t in items if split.held_out(t) == held_out]


def _sql_prompt(rng: random.Random, held_out: bool = False) -> str:
    tables = [t for t in SQL_TABLES if split.held_out(t[0]) == held_out] or SQL_TABLES
    table, cols = rng.choice(tables)
    c1, c2 = rng.sample(cols[1:], 2)
    question = rng.choice(SQL_QUESTIONS).format(c1=c1, c2=c2)
    schema = f"CREATE TABLE {table} ({', '.join(cols)});"
    return f"Given the SQLite schema:\n{schema}\nWrite an SQL query to answer: {question}"


def make_prompt(rng: random.Random, held_out: bool = False) -> str:
    """One user message drawn from the train (or held-out) half of topics and tasks."""
    kind = rng.random()
    if kind < 0.15:
        task = rng.choice(_split(CODE_TASKS, held_out))
        return rng.choice(CODE_TEMPLATES).format(task=task)
    if kind < 0.22:
        return _sql_prompt(rng, held_out)
    topic = rng.choice(_split(TOPICS, held_out))
    return rng.choice(TEMPLATES).format(topic=topic, name=rng.choice(NAMES))


def make_prompts(n: int, seed: int, held_out: bool = False) -> list[str]:
    rng = random.Random(seed * 7919 + (1 if held_out else 0))
    return [make_prompt(rng, held_out) for _ in range(n)]


def chat_ids(tokenizer, prompt: str) -> torch.Tensor:
    """A one-turn user prompt through the tokenizer's chat template, ready to generate. [1, L]"""
    return tokenizer.apply_chat_template(
        [{"role": "user", "content": prompt}], add_generation_prompt=True, return_tensors="pt", return_dict=True
    )["input_ids"]
