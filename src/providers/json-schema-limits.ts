// The documented limits on the JSON Schemas clients send (tool parameters and
// response_format.json_schema.schema), checked when a request is admitted, before any work is
// queued. docs/limits.md states each one; this is the only place their numbers live.

/** The longest answer the service gives: max_tokens' ceiling. */
export const MAX_ANSWER_TOKENS = 8192;

export const SCHEMA_LIMITS = {
  /** The schema's JSON text. */
  bytes: 256 * 1024,
  /** Levels of JSON nesting in the schema. */
  depth: 32,
  /** Entries of one `properties`. */
  propertiesPerObject: 5000,
  /** Entries of every `properties` in the schema. */
  properties: 10_000,
  /** Distinct `$ref`s in the schema. */
  refs: 1000,
  /** Values of one `enum`. */
  enumValues: 1000,
  /**
   * The longest answer in characters: MAX_ANSWER_TOKENS at two characters a token, what any text
   * the service writes reaches at the least. A schema whose shortest answer is longer is refused.
   */
  answerChars: 2 * MAX_ANSWER_TOKENS,
  /** The largest minLength: the longest string an answer can hold. */
  minLength: 2 * MAX_ANSWER_TOKENS,
  /** The largest minItems (and minContains): each item takes a value and a comma. */
  minItems: MAX_ANSWER_TOKENS,
  /** The largest minProperties: each entry takes a name, a colon, a value and a comma. */
  minProperties: 2048,
  /** The largest count of a pattern's counted repetition ({n}, {n,m}), as RE2 allows. */
  patternRepetitions: 1000,
  /**
   * The schema's distinct patterns with their counted repetitions written out (how the linear
   * engine runs them), added up: the engine's work per character grows with a pattern's length,
   * and writing them out is the admission's costliest check.
   */
  patternWrittenChars: 50_000,
} as const;

/** A problem with a client's schema: where in the schema (keys and indexes from its root) and what. */
export interface SchemaIssue {
  at: (string | number)[];
  msg: string;
}

export const formatCount = (n: number): string => n.toLocaleString('en-US');
