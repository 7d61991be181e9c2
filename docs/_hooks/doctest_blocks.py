"""MkDocs hook: docstring examples (``>>>`` lines and their output) render as code.

Docstrings are markdown here; an interactive example would otherwise read as prose
(``**`` as bold, ``[a, b]`` as a link). This adds a Markdown preprocessor that fences
every run of lines starting at a ``>>>`` line and ending at a blank line.
"""
import re

from markdown import Extension
from markdown.preprocessors import Preprocessor

PROMPT = re.compile(r"^(\s*)>>> ")


class DoctestFence(Preprocessor):
    def run(self, lines):
        out, inside = [], False
        for line in lines:
            if not inside and PROMPT.match(line):
                indent = PROMPT.match(line).group(1)
                out += ["", indent + "```pycon"]
                inside = True
            elif inside and not line.strip():
                out += [indent + "```", ""]
                inside = False
            out.append(line)
        if inside:
            out.append(indent + "```")
        return out


class DoctestFenceExtension(Extension):
    def extendMarkdown(self, md):
        md.preprocessors.register(DoctestFence(md), "doctest_fence", 40)


def on_config(config):
    config.markdown_extensions.append(DoctestFenceExtension())
    return config
