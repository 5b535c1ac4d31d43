"""The project's knowledge base as tools: read `.agents/knowledge/*.md`, rank it, guard it, append to it.

Modules: `folder` (where the knowledge lives), `entries` (Markdown -> entries with line
numbers), `vocabulary` (tokens, stems and the field's synonym concepts), `index` (BM25
ranking with an mtime-invalidated cache), `symptoms` (the one symptom vocabulary,
data/symptoms.yaml), `pitfalls` (the built-in pitfall library, data/pitfalls.yaml),
`checklists` (rendered into prompts/), `placeholders` (init's example entries), `guards`
(generated-path globs), `codegen` (the project's codegen check), `dedupe`,
`appender` (format-following atomic writes), `testmap` (regression guards from
testing.md), and the two tool engines `check` and `capture`.
"""
