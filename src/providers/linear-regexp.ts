// A client's `pattern` runs on V8's linear-time regexp engine (the 'l' flag), so no pattern and no
// string can make matching backtrack: the time is linear in the string whatever the pattern.
import v8 from 'node:v8';
import { SCHEMA_LIMITS } from './json-schema-limits.js';

v8.setFlagsFromString('--enable-experimental-regexp-engine');
// Any other regexp in the process that backtracks too long (one a library compiles from a client's
// pattern without the 'l' flag) falls back to the same engine when its pattern allows it.
v8.setFlagsFromString('--enable-experimental-regexp-engine-on-excessive-backtracks');

// Without the 'u' flag (the linear engine does not take it), these would silently mean something else.
const UNICODE_ONLY = /\\[pP]\{|\\u\{|[\ud800-\udfff]/;

/** Why the service will not run `pattern`, or undefined when it will (see linearRegExp). */
export function patternProblem(pattern: string): string | undefined {
  try {
    new RegExp(pattern, 'u');
  } catch {
    return `'${pattern}' is not a valid regular expression (ECMA-262, as JSON Schema's pattern is)`;
  }
  if (UNICODE_ONLY.test(pattern))
    return `'${pattern}' uses Unicode property or code point escapes (\\p{…}, \\u{…}) or characters outside the Basic Multilingual Plane, which the service does not support in a pattern`;
  try {
    // eslint-disable-next-line no-invalid-regexp -- 'l' is V8's linear-engine flag, enabled above
    new RegExp(pattern, 'l');
    return undefined;
  } catch {
    return `'${pattern}' cannot be matched in linear time: the service supports patterns without backreferences and lookaround, whose counted repetitions ({n}, {n,m}) repeat at most ${SCHEMA_LIMITS.patternRepetitions} times in all`;
  }
}

/** `pattern` compiled for the linear-time engine (throws when patternProblem has a reason). */
// eslint-disable-next-line no-invalid-regexp -- 'l' is V8's linear-engine flag, enabled above
export const linearRegExp = (pattern: string): RegExp => new RegExp(pattern, 'l');

/** linearRegExp as Ajv's `code.regExp` engine (`code` names it in standalone code, which the service does not emit). */
export const linearRegExpEngine = Object.assign((pattern: string) => linearRegExp(pattern), {
  code: 'linearRegExp',
});
