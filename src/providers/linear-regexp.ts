// A client's `pattern` runs on V8's linear-time regexp engine (the 'l' flag), so no pattern and no
// string can make matching backtrack: the time is linear in the string whatever the pattern.
import v8 from 'node:v8';
import regexpTree from 'regexp-tree';
import type { AstNode, Expression } from 'regexp-tree/ast';
import { formatCount, SCHEMA_LIMITS } from './json-schema-limits.js';

v8.setFlagsFromString('--enable-experimental-regexp-engine');
// Any other regexp in the process that backtracks too long (one a library compiles from a client's
// pattern without the 'l' flag) falls back to the same engine when its pattern allows it.
v8.setFlagsFromString('--enable-experimental-regexp-engine-on-excessive-backtracks');

// Without the 'u' flag (the linear engine does not take it), these would silently mean something else.
const UNICODE_ONLY = /\\[pP]\{|\\u\{|[\ud800-\udfff]/;

/**
 * Why the service will not run `pattern`, or how long it is as the engine runs it (written out,
 * see linearRegExp): the engine's work per character of a string grows with that length.
 */
export function patternCheck(pattern: string): { problem: string } | { chars: number } {
  try {
    new RegExp(pattern, 'u');
  } catch {
    return { problem: `'${pattern}' is not a valid regular expression (ECMA-262, as JSON Schema's pattern is)` };
  }
  if (UNICODE_ONLY.test(pattern))
    return {
      problem: `'${pattern}' uses Unicode property or code point escapes (\\p{…}, \\u{…}) or characters outside the Basic Multilingual Plane, which the service does not support in a pattern`,
    };
  try {
    return { chars: linearRegExp(pattern).source.length };
  } catch (err) {
    if (err instanceof PatternTooLarge) return { problem: `'${pattern}' ${err.message}` };
    return {
      problem: `'${pattern}' cannot be matched in linear time: the service supports patterns without backreferences and lookaround`,
    };
  }
}

/** `pattern` compiled for the linear-time engine (throws when patternCheck finds a problem). */
export function linearRegExp(pattern: string): RegExp {
  try {
    // eslint-disable-next-line no-invalid-regexp -- 'l' is V8's linear-engine flag, enabled above
    return new RegExp(pattern, 'l');
  } catch (err) {
    // The engine refuses a counted repetition above 16 ({1,64}) to keep its automaton small; the
    // same repetition written out is the automaton it would have built, which it takes.
    const written = writtenOut(pattern);
    if (written === undefined) throw err;
    // eslint-disable-next-line no-invalid-regexp -- 'l' is V8's linear-engine flag, enabled above
    return new RegExp(written, 'l');
  }
}

/** linearRegExp as Ajv's `code.regExp` engine (`code` names it in standalone code, which the service does not emit). */
export const linearRegExpEngine = Object.assign((pattern: string) => linearRegExp(pattern), {
  code: 'linearRegExp',
});

class PatternTooLarge extends Error {}
class NotWritable extends Error {}

/** Repetitions the linear engine takes as a count; above it, a repetition is written out. */
const ENGINE_COUNT = 16;

/**
 * `pattern` with each counted repetition above the engine's count written out as copies
 * (`x{2,4}` → `(?:x)(?:x)(?:(?:x)(?:x)?)?`), or undefined when nothing of that kind is the reason
 * it cannot run (backreferences, lookaround). Groups become non-capturing: only `test` runs a
 * client's pattern, and copies of a named group could not share its name.
 */
function writtenOut(pattern: string): string | undefined {
  let ast;
  try {
    ast = regexpTree.parse(new RegExp(pattern));
  } catch {
    return undefined;
  }
  let counted = false;
  const visit = (node: AstNode): AstNode => {
    // Its groups are about to lose their numbers: a backreference would turn into an octal escape.
    if (node.type === 'Backreference') throw new NotWritable();
    for (const [key, value] of Object.entries(node) as [string, unknown][]) {
      if (key === 'loc') continue;
      if (Array.isArray(value))
        (node as unknown as Record<string, unknown>)[key] = (value as unknown[]).map((v) => (isNode(v) ? visit(v) : v));
      else if (isNode(value)) (node as unknown as Record<string, unknown>)[key] = visit(value);
    }
    if (node.type === 'Group' && node.capturing)
      return { type: 'Group', capturing: false, expression: node.expression };
    if (node.type !== 'Repetition' || node.quantifier.kind !== 'Range') return node;
    const { from, to } = node.quantifier;
    if (Math.max(from, to ?? from) <= ENGINE_COUNT) return node;
    if (Math.max(from, to ?? from) > SCHEMA_LIMITS.patternRepetitions)
      throw new PatternTooLarge(
        `repeats a part more than ${formatCount(SCHEMA_LIMITS.patternRepetitions)} times ({${from},${to ?? ''}}); bound the string with maxLength instead`,
      );
    counted = true;
    // Copies share one node: the generator writes each out, and nothing is parsed again.
    const copy: Expression = { type: 'Group', capturing: false, expression: node.expression };
    const written = (regexpTree.generate(node.expression).length + 6) * Math.max(from, (to ?? from) + 1);
    if (written > SCHEMA_LIMITS.patternWrittenChars) throw tooLarge();
    const optional = (expression: Expression, kind: '?' | '*'): Expression => ({
      type: 'Repetition',
      expression,
      quantifier: { type: 'Quantifier', kind, greedy: true },
    });
    let tail: Expression | undefined = to === undefined ? optional(copy, '*') : undefined;
    for (let i = from; to !== undefined && i < to; i++)
      tail = optional({ type: 'Group', capturing: false, expression: tail ? sequence([copy, tail]) : copy }, '?');
    const parts: Expression[] = Array.from({ length: from }, () => copy);
    if (tail) parts.push(tail);
    return { type: 'Group', capturing: false, expression: sequence(parts) };
  };
  let written: string;
  try {
    written = regexpTree.generate(visit(ast.body!));
  } catch (err) {
    if (err instanceof NotWritable) return undefined;
    throw err;
  }
  if (!counted) return undefined;
  if (written.length > SCHEMA_LIMITS.patternWrittenChars) throw tooLarge();
  return written;
}

const tooLarge = () =>
  new PatternTooLarge(
    `has counted repetitions that come to more than ${formatCount(SCHEMA_LIMITS.patternWrittenChars)} characters written out; bound the string with maxLength instead`,
  );

const sequence = (expressions: Expression[]): Expression => ({ type: 'Alternative', expressions });

const isNode = (v: unknown): v is AstNode =>
  typeof v === 'object' && v !== null && typeof (v as { type?: unknown }).type === 'string';
