// The limits of docs/limits.md applied to a client's JSON Schema, one walk over its subschemas
// without recursion: sizes, counts, the lengths the service can write, and patterns.
import { SCHEMA_LIMITS, formatCount, MAX_ANSWER_TOKENS, type SchemaIssue } from './json-schema-limits.js';
import { forEachSubschema, type Loc, type SchemaNode } from './json-schema-walk.js';
import { patternCheck } from './linear-regexp.js';

/** At most this many issues are reported for one schema. */
const MAX_ISSUES = 10;

/** How deep `value` nests, counted no further than the limit (so a deeper one costs no more). */
export function depthOf(value: unknown): number {
  let deepest = 0;
  const stack: { v: unknown; depth: number }[] = [{ v: value, depth: 0 }];
  while (stack.length > 0) {
    const { v, depth } = stack.pop()!;
    deepest = Math.max(deepest, depth);
    if (depth > SCHEMA_LIMITS.depth || v === null || typeof v !== 'object') continue;
    for (const child of Object.values(v)) stack.push({ v: child, depth: depth + 1 });
  }
  return deepest;
}

const producible: [keyword: string, limit: number, what: (n: string) => string][] = [
  ['minLength', SCHEMA_LIMITS.minLength, (n) => `the longest string the service can produce is ${n} characters`],
  ['minItems', SCHEMA_LIMITS.minItems, (n) => `the longest array the service can produce has ${n} items`],
  ['minContains', SCHEMA_LIMITS.minItems, (n) => `the longest array the service can produce has ${n} items`],
  [
    'minProperties',
    SCHEMA_LIMITS.minProperties,
    (n) => `the largest object the service can produce has ${n} properties`,
  ],
];

function nodeIssues(
  s: Record<string, unknown>,
  at: Loc,
  issues: SchemaIssue[],
  patternProblem: (pattern: string) => string | undefined,
): number {
  let properties = 0;
  if (s.properties !== null && typeof s.properties === 'object') {
    properties = Object.keys(s.properties).length;
    if (properties > SCHEMA_LIMITS.propertiesPerObject)
      issues.push({
        at: [...at, 'properties'],
        msg: `The schema's object has ${formatCount(properties)} properties; at most ${formatCount(SCHEMA_LIMITS.propertiesPerObject)} are supported`,
      });
  }
  if (Array.isArray(s.enum) && s.enum.length > SCHEMA_LIMITS.enumValues)
    issues.push({
      at: [...at, 'enum'],
      msg: `The enum has ${formatCount(s.enum.length)} values; at most ${formatCount(SCHEMA_LIMITS.enumValues)} are supported`,
    });
  for (const [keyword, limit, what] of producible) {
    const n = s[keyword];
    if (typeof n === 'number' && n > limit)
      issues.push({
        at: [...at, keyword],
        msg: `${keyword} ${formatCount(n)} cannot be met: ${what(formatCount(limit))} (an answer is at most ${formatCount(MAX_ANSWER_TOKENS)} tokens)`,
      });
  }
  if (typeof s.pattern === 'string') {
    const problem = patternProblem(s.pattern);
    if (problem) issues.push({ at: [...at, 'pattern'], msg: `The pattern ${problem}` });
  }
  if (s.patternProperties !== null && typeof s.patternProperties === 'object')
    for (const key of Object.keys(s.patternProperties)) {
      const problem = patternProblem(key);
      if (problem) issues.push({ at: [...at, 'patternProperties', key], msg: `The pattern ${problem}` });
    }
  return properties;
}

/** Where `schema` passes the service's limits, in the order found (at most MAX_ISSUES). */
export function limitIssues(schema: SchemaNode): SchemaIssue[] {
  if (depthOf(schema) > SCHEMA_LIMITS.depth)
    return [{ at: [], msg: `The schema is nested deeper than ${SCHEMA_LIMITS.depth} levels` }];
  const bytes = Buffer.byteLength(JSON.stringify(schema));
  if (bytes > SCHEMA_LIMITS.bytes)
    return [
      {
        at: [],
        msg: `The schema is ${formatCount(bytes)} bytes of JSON; at most ${formatCount(SCHEMA_LIMITS.bytes)} are supported`,
      },
    ];
  const issues: SchemaIssue[] = [];
  let properties = 0;
  // Each distinct pattern is checked once, and their lengths as the engine runs them add up.
  const patterns = new Map<string, string | undefined>();
  let patternChars = 0;
  const patternProblem = (pattern: string) => {
    if (patterns.has(pattern)) return patterns.get(pattern);
    const check = patternCheck(pattern);
    const problem = 'problem' in check ? check.problem : undefined;
    if ('chars' in check) patternChars += check.chars;
    patterns.set(pattern, problem);
    return problem;
  };
  const refs = new Set<string>();
  forEachSubschema(schema, (node, at) => {
    if (typeof node !== 'object') return;
    if (typeof node.$ref === 'string') refs.add(node.$ref);
    if (issues.length < MAX_ISSUES) properties += nodeIssues(node, at, issues, patternProblem);
  });
  if (refs.size > SCHEMA_LIMITS.refs)
    issues.push({
      at: [],
      msg: `The schema has ${formatCount(refs.size)} distinct $refs; at most ${formatCount(SCHEMA_LIMITS.refs)} are supported`,
    });
  if (patternChars > SCHEMA_LIMITS.patternWrittenChars)
    issues.push({
      at: [],
      msg: `The schema's patterns come to ${formatCount(patternChars)} characters with their counted repetitions written out; at most ${formatCount(SCHEMA_LIMITS.patternWrittenChars)} are supported (bound strings with maxLength instead)`,
    });
  if (properties > SCHEMA_LIMITS.properties)
    issues.push({
      at: [],
      msg: `The schema has ${formatCount(properties)} properties in all; at most ${formatCount(SCHEMA_LIMITS.properties)} are supported`,
    });
  return issues.slice(0, MAX_ISSUES);
}
