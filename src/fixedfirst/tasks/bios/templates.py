"""The five sentence templates of each attribute, and how a sentence splits into prompt and answer.

Every template puts the answer last, followed by the terminator ".": the prompt is the text before
the answer, and the answer is the value's words plus ".". The terminator is what makes greedy
exact match a teacher-forced check: greedy decoding reproduces the answer exactly if and only if
every answer token is the argmax given the tokens before it, and the final "." makes "Velmora"
differ from a continued "Velmora Institute" (docs/design.md §5).

Within one attribute all five templates have the same number of words. With value lengths fixed
per attribute (see `world.py`) every biography then has the same length, so a training row holds
whole biographies with no padding. The templates of different attributes differ before the answer
(e.g. "was born in" / "was born on the" / "was born during"), so a prompt names its attribute.
"""

from __future__ import annotations

from dataclasses import dataclass

NAME = "{name}"
VALUE = "{value}"
TERMINATOR = "."

TEMPLATES: dict[str, tuple[str, ...]] = {
    "birth_city": (
        "{name} was born in {value} .",
        "{name} 's birthplace is {value} .",
        "{name} 's hometown is {value} .",
        "{name} originally hails from {value} .",
        "{name} began life in {value} .",
    ),
    "birth_day": (
        "{name} was born on the {value} .",
        "{name} 's birthday is the {value} .",
        "{name} entered life on the {value} .",
        "{name} celebrates birthdays on the {value} .",
        "{name} 's birthdate is the {value} .",
    ),
    "birth_month": (
        "{name} was born during {value} .",
        "{name} entered life during {value} .",
        "{name} celebrates birthdays in {value} .",
        "{name} has birthdays in {value} .",
        "{name} first arrived during {value} .",
    ),
    "university": (
        "{name} was educated at {value} .",
        "{name} took classes at {value} .",
        "{name} earned degrees at {value} .",
        "{name} completed studies at {value} .",
        "{name} 's university was {value} .",
    ),
    "major": (
        "{name} 's major was {value} .",
        "{name} focused studies on {value} .",
        "{name} specialized academically in {value} .",
        "{name} chose to study {value} .",
        "{name} did coursework in {value} .",
    ),
    "employer": (
        "{name} was employed by {value} .",
        "{name} 's employer was {value} .",
        "{name} found work at {value} .",
        "{name} worked full-time for {value} .",
        "{name} was hired by {value} .",
    ),
}

TEMPLATES_PER_ATTRIBUTE = 5


@dataclass(frozen=True)
class Sentence:
    """One rendered template: `prompt` (the text before the answer) and `answer` (value + ".")."""

    prompt: str
    answer: str

    @property
    def text(self) -> str:
        return f"{self.prompt} {self.answer}"


def render(attribute: str, template: int, name: str, value: str) -> Sentence:
    """Template number `template` of `attribute`, filled with a person's name and value."""
    text = TEMPLATES[attribute][template]
    prompt = text[: text.index(VALUE)].rstrip().replace(NAME, name)
    return Sentence(prompt=prompt, answer=f"{value} {TERMINATOR}")


def template_words() -> list[str]:
    """Every word the templates use, in order of first appearance (for the vocabulary)."""
    seen: dict[str, None] = {}
    for templates in TEMPLATES.values():
        for text in templates:
            for word in text.split():
                if word not in (NAME, VALUE):
                    seen.setdefault(word)
    return list(seen)
