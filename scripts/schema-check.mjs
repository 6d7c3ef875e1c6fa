// The schema check: a change to schema.graphql that breaks a client of the last release
// (a field, argument, type or enum value removed, a type changed, a required argument
// added, …) fails unless CHANGELOG.md names it under its "Unreleased" heading.
//
//     node scripts/schema-check.mjs [released.graphql [current.graphql [CHANGELOG.md]]]
//
// The defaults are the repository's files. The released schema is a committed file,
// schema.released.graphql, replaced by schema.graphql at each release (see CHANGELOG.md),
// rather than the schema at the last `v*` tag: CI runs in a fresh clone that has tags only
// when they were pushed, and a repository without one would have nothing to compare with.
//
// A breaking change is named by its path: `Type.field` for a field or an argument of it
// (`Query.remarks` for its argument `first` too), `Enum.VALUE` for an enum value, `Input.field`
// for an input field, `Type` for a type, `@name` for a directive. The path must appear in the
// Unreleased section as a whole name (`Query.remarks` is not named by `Query.remarksPage`).
// Dangerous changes (a default value changed, an enum value added, …) are printed and pass.

import { readFileSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { buildSchema, findBreakingChanges, findDangerousChanges, specifiedDirectives } from 'graphql';

const root = join(dirname(fileURLToPath(import.meta.url)), '..');
const [
  releasedFile = join(root, 'schema.released.graphql'),
  currentFile = join(root, 'schema.graphql'),
  changelogFile = join(root, 'CHANGELOG.md'),
] = process.argv.slice(2);

const released = buildSchema(readFileSync(releasedFile, 'utf8'));
const current = buildSchema(readFileSync(currentFile, 'utf8'));

/** The path a change is named by in the changelog, read from graphql-js's description. */
function pathOf(change) {
  const text = change.description;
  let m;
  if ((m = /^(\w+) was removed from enum type (\w+)/.exec(text))) return `${m[2]}.${m[1]}`;
  if ((m = /^(\w+) was removed from union type (\w+)/.exec(text))) return m[2];
  if ((m = /^A required field (\w+) on input type (\w+)/.exec(text))) return `${m[2]}.${m[1]}`;
  if ((m = /^A required arg (\w+) on (\w+)\.(\w+)/.exec(text))) return `${m[2]}.${m[3]}`;
  if (/DIRECTIVE/.test(change.type)) {
    m = /(?:on directive|from) (\w+)\.$/.exec(text) || /^(\w+) was removed\.$/.exec(text);
    if (m) return `@${m[1]}`;
  }
  if ((m = /^(\w+)\.(\w+)/.exec(text))) return `${m[1]}.${m[2]}`;
  if ((m = /^(\w+)/.exec(text))) return m[1];
  return text;
}

/** The text of the changelog's "Unreleased" section: from its heading to the next one of
 * the same or a higher level. */
function unreleased(changelog) {
  const lines = changelog.split('\n');
  const start = lines.findIndex((line) => /^#{1,6}\s+\[?Unreleased\]?/i.test(line));
  if (start < 0) return '';
  const level = lines[start].match(/^#+/)[0].length;
  const end = lines.findIndex(
    (line, i) => i > start && /^#+\s/.test(line) && line.match(/^#+/)[0].length <= level,
  );
  return lines.slice(start + 1, end < 0 ? undefined : end).join('\n');
}

function escape(text) {
  return text.replace(/[.*+?^${}()|[\]\\]/g, '\\$&');
}

/** Whether `path` appears in `text` as a whole name. */
function names(text, path) {
  return new RegExp(`(?<![\\w.@])${escape(path)}(?![\\w])`).test(text);
}

/** Whether a change is to a directive of the GraphQL specification (`@deprecated`,
 * `@specifiedBy`, …). Such a directive means what the specification says, whatever
 * definition of it the SDL holds: async-graphql prints `@deprecated` once a field is
 * deprecated, without the `DIRECTIVE_DEFINITION` location graphql-js 16.15 gives its own,
 * which graphql-js would otherwise report as a location removed. */
function toSpecifiedDirective(change) {
  const path = pathOf(change);
  return /DIRECTIVE/.test(change.type) && specifiedDirectives.some((d) => `@${d.name}` === path);
}

const section = unreleased(readFileSync(changelogFile, 'utf8'));
const breaking = findBreakingChanges(released, current).filter((change) => {
  if (!toSpecifiedDirective(change)) return true;
  console.log(`ignored: ${change.description} (a directive of the specification)`);
  return false;
});
const dangerous = findDangerousChanges(released, current);

for (const change of dangerous) {
  console.log(`note: ${change.description} (${change.type}, not breaking)`);
}
const missing = [];
for (const change of breaking) {
  const path = pathOf(change);
  const listed = names(section, path);
  console.log(`${listed ? 'listed' : 'NOT LISTED'}: ${path}: ${change.description}`);
  if (!listed) missing.push(path);
}
if (missing.length > 0) {
  console.error(
    `\n${missing.length} breaking change(s) to schema.graphql since the last release are not ` +
      `in CHANGELOG.md under "Unreleased": ${[...new Set(missing)].join(', ')}.\n` +
      'Name each there (e.g. "- Removed `Query.foo`: use `Query.bar`"), or keep the schema ' +
      'compatible (deprecate with @deprecated instead of removing).',
  );
  process.exit(1);
}
console.log(
  breaking.length === 0
    ? 'schema.graphql makes no breaking change since the last release'
    : `every breaking change (${breaking.length}) is in CHANGELOG.md under "Unreleased"`,
);
