#!/usr/bin/env python3
"""Checks the links between the Markdown documents (README.md, CONTRIBUTING.md, docs/*.md,
Fuzz/README.md, examples/**/README.md): every relative link names a file that exists, and every
#anchor names an explicit <a id="..."> or a heading of the target page (GitHub's slugs).
External links (http:, https:, mailto:) are not followed. Run by scripts/docs; usable alone:

    scripts/check-doc-links.py [--root DIR]

Prints each broken link as FILE:LINE: message and exits 1 when there is one.
"""

import argparse
import glob
import os
import re
import sys

LINK = re.compile(r"\[(?:[^\]\[]|\[[^\]]*\])*\]\(([^()\s]+)(?:\s+\"[^\"]*\")?\)")
EXPLICIT_ANCHOR = re.compile(r"<a\s+(?:id|name)=\"([^\"]+)\"")
HEADING = re.compile(r"^(#{1,6})\s+(.*?)\s*#*\s*$")


def documents(root):
    names = ["README.md", "CONTRIBUTING.md"]
    names += sorted(os.path.relpath(p, root) for p in glob.glob(os.path.join(root, "docs", "*.md")))
    names += sorted(os.path.relpath(p, root) for p in glob.glob(os.path.join(root, "Fuzz", "README.md")))
    names += sorted(os.path.relpath(p, root) for p in glob.glob(os.path.join(root, "examples", "**", "README.md"), recursive=True))
    return [n for n in names if os.path.isfile(os.path.join(root, n))]


def outside_code(text):
    """(line number, line) of the lines not inside fenced code blocks."""
    fenced = False
    for number, line in enumerate(text.split("\n"), 1):
        if line.lstrip().startswith("```"):
            fenced = not fenced
            continue
        if not fenced:
            yield number, line


def slug(heading):
    """GitHub's anchor for a heading: lower case, punctuation dropped, spaces to hyphens."""
    text = re.sub(r"<[^>]+>", "", heading)
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", text)
    text = text.lower().replace("`", "")
    text = re.sub(r"[^\w\- ]", "", text)
    return text.replace(" ", "-")


def anchors(path, cache={}):
    if path not in cache:
        found, seen = set(), {}
        with open(path, encoding="utf-8") as handle:
            text = handle.read()
        found.update(EXPLICIT_ANCHOR.findall(text))
        for _, line in outside_code(text):
            match = HEADING.match(line)
            if match:
                base = slug(match.group(2))
                count = seen.get(base, 0)
                seen[base] = count + 1
                found.add(base if count == 0 else f"{base}-{count}")
        cache[path] = found
    return cache[path]


def check(root):
    problems = []
    for name in documents(root):
        path = os.path.join(root, name)
        with open(path, encoding="utf-8") as handle:
            text = handle.read()
        for number, line in outside_code(text):
            line = re.sub(r"`[^`]*`", "``", line)  # links inside inline code are not links
            for target in LINK.findall(line):
                if re.match(r"^[a-z][a-z0-9+.-]*:", target):
                    continue
                file_part, _, anchor = target.partition("#")
                target_path = os.path.normpath(os.path.join(os.path.dirname(path), file_part)) if file_part else path
                where = f"{name}:{number}"
                if not os.path.exists(target_path):
                    problems.append(f"{where}: {target}: no such file")
                    continue
                if anchor:
                    if not target_path.endswith(".md"):
                        problems.append(f"{where}: {target}: an anchor into a file that is not Markdown")
                    elif anchor not in anchors(target_path):
                        problems.append(f"{where}: {target}: no anchor #{anchor} in {os.path.relpath(target_path, root)}")
    return problems


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--root", default=os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
    options = parser.parse_args()
    problems = check(os.path.abspath(options.root))
    for problem in problems:
        print(problem, file=sys.stderr)
    if problems:
        print(f"check-doc-links: {len(problems)} broken link(s)", file=sys.stderr)
        return 1
    print(f"check-doc-links: ok ({len(documents(os.path.abspath(options.root)))} documents)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
