// Token counts with OpenAI's o200k_base encoding (gpt-tokenizer, pure JS). Used for the local
// model's usage, for admission estimates, and for counting what a cancelled stream produced.
// Other providers tokenize differently; their own usage numbers win whenever they send them.
import { countTokens as bpeCount, encode, decodeGenerator } from 'gpt-tokenizer/encoding/o200k_base';
import { imagesOf, textOf } from './messages.js';
import type { ChatMessage, CompletionParams } from './types.js';

// Text is plain text here: "<|endoftext|>" in a prompt is characters, not a control token
// (the library's default would throw on it).
const PLAIN = { disallowedSpecial: new Set<string>() };

// BPE merges inside one pre-tokenized piece are quadratic in its length in this library: a
// 50,000-character run of "x" or of spaces takes over a second. Runs longer than this are counted
// in slices, which changes the count by at most a token per slice on such degenerate input and
// keeps the cost linear. Ordinary text never has runs this long, so its count is exact.
const MAX_RUN = 256;
const LONG_RUN = new RegExp(`\\S{${MAX_RUN + 1},}|\\s{${MAX_RUN + 1},}`, 'g');

/**
 * Tokens in `text`. Linear time: about 20 ms per MB of English prose on one core (so ~100 ms
 * for a 5 MB prompt, the largest the request bounds allow), and ~10 ms for a 50,000-character
 * message of a single repeated character.
 */
export function countTokens(text: string): number {
  if (text.length <= MAX_RUN) return text.length === 0 ? 0 : bpeCount(text, PLAIN);
  let total = 0;
  forEachSlice(text, (slice) => (total += bpeCount(slice, PLAIN)));
  return total;
}

/** The token ids of `text`, sliced as countTokens slices it: as many as it counts. */
export function encodeTokens(text: string): number[] {
  if (text.length <= MAX_RUN) return text.length === 0 ? [] : encode(text, PLAIN);
  const ids: number[] = [];
  forEachSlice(text, (slice) => {
    for (const id of encode(slice, PLAIN)) ids.push(id);
  });
  return ids;
}

/** The pieces a long text is tokenized in: the text between long runs, and each long run in MAX_RUN slices. */
function forEachSlice(text: string, use: (slice: string) => void): void {
  let last = 0;
  LONG_RUN.lastIndex = 0;
  for (let m = LONG_RUN.exec(text); m !== null; m = LONG_RUN.exec(text)) {
    if (m.index > last) use(text.slice(last, m.index));
    const run = m[0];
    for (let i = 0; i < run.length; i += MAX_RUN) use(run.slice(i, i + MAX_RUN));
    last = m.index + run.length;
  }
  if (last < text.length) use(text.slice(last));
}

// OpenAI's published accounting for chat models: every message costs 3 tokens of framing
// (<|start|>{role}<|message|>...<|end|>) plus its role and content, and every reply is primed
// with 3 more (<|start|>assistant<|message|>).
export const TOKENS_PER_MESSAGE = 3;
export const REPLY_PRIMING_TOKENS = 3;

/**
 * An image in a prompt, whatever its size: OpenAI's count for a 1024×1024 image at high detail
 * (85 + 4 tiles × 170). Providers count by the image's pixels, known only once it is decoded, so
 * this is the admission estimate and the local model's count; the provider's own figure settles.
 */
export const IMAGE_TOKENS = 765;
/** The framing of one tool call in a message, or of one tool definition. */
export const TOKENS_PER_TOOL = 8;

/**
 * Prompt tokens of a chat request, the way OpenAI counts them for o200k models: every message's
 * role and text, each image (IMAGE_TOKENS), each tool call a message made and each tool result, the
 * tool definitions and a json_schema the answer must match (their JSON text, as the providers put
 * them in the prompt).
 */
export function countPromptTokens(
  messages: readonly ChatMessage[],
  extras: Pick<CompletionParams, 'tools' | 'response_format'> = {},
): number {
  let total = 0;
  for (const piece of promptPieces(messages, extras))
    total += typeof piece === 'string' ? countTokens(piece) : piece.tokens;
  return total;
}

/**
 * A part of a prompt as its count reads it: text, to tokenize; or `tokens` tokens that are no text
 * (a message's framing, an image), which `key` tells apart from every other such part.
 */
export type PromptPiece = string | { readonly tokens: number; readonly key: string };

/**
 * A chat request's prompt in the order a model reads it (the order its prefixes are cached in): the
 * tool definitions and the json_schema, which the providers put first, then each message, then the
 * reply's priming.
 */
export function* promptPieces(
  messages: readonly ChatMessage[],
  extras: Pick<CompletionParams, 'tools' | 'response_format'> = {},
): Generator<PromptPiece> {
  for (const tool of extras.tools ?? []) yield* jsonPieces('tool', tool.function);
  const format = extras.response_format;
  if (format?.type === 'json_schema') yield* jsonPieces('json_schema', format.json_schema);
  for (const m of messages) {
    const text = textOf(m.content);
    const images = imagesOf(m.content);
    // The framing says where each of the message's parts ends, so no other messages read as the same tokens.
    const shape = `${m.role.length} ${text.length} ${images.length} ${m.tool_calls?.length ?? 0} ${m.tool_call_id?.length ?? -1}`;
    yield { tokens: TOKENS_PER_MESSAGE, key: `message ${shape} ${m.name ?? ''}` };
    yield m.role;
    yield text;
    for (const { image_url } of images)
      yield { tokens: IMAGE_TOKENS, key: `image ${image_url.detail} ${image_url.url}` };
    for (const call of m.tool_calls ?? []) yield* jsonPieces('tool call', call.function);
    if (m.tool_call_id !== undefined) yield m.tool_call_id;
  }
  yield { tokens: REPLY_PRIMING_TOKENS, key: 'reply' };
}

/** A tool call or definition: its framing, then its JSON text. */
function* jsonPieces(kind: string, value: unknown): Generator<PromptPiece> {
  const json = JSON.stringify(value);
  yield { tokens: TOKENS_PER_TOOL, key: `${kind} ${json.length}` };
  yield json;
}

/**
 * Prompts of up to this many characters (promptChars) are tokenized on the event loop: about a
 * millisecond. Larger ones, up to the request bound's 5 MB (about 100 ms), never are: the web tier
 * estimates them and the local model counts them on a compute thread.
 */
export const INLINE_TOKENIZE_MAX_CHARS = 64_000;

/**
 * The characters a prompt's token count reads: messages' text and tool calls, tools and json_schema
 * as JSON (escapes aside). Counting stops once past `upTo`: the answer is then only "more".
 */
export function promptChars(
  messages: readonly ChatMessage[],
  extras: Pick<CompletionParams, 'tools' | 'response_format'> = {},
  upTo = Infinity,
): number {
  let chars = 0;
  for (const m of messages) {
    chars += textOf(m.content).length + (m.tool_calls ? jsonSize(m.tool_calls, upTo) : 0);
    if (chars > upTo) return chars;
  }
  if (extras.tools) chars += jsonSize(extras.tools, upTo);
  if (extras.response_format && chars <= upTo) chars += jsonSize(extras.response_format, upTo);
  return chars;
}

/**
 * The size of a value's JSON text without writing it (a request's tools may take 60 MB): each
 * string by `measure` (its characters, or its UTF-8 bytes), keys and punctuation by their
 * characters, escapes not counted. Counting stops once past `upTo`.
 */
export function jsonSize(
  value: unknown,
  upTo = Infinity,
  measure: (text: string) => number = (text) => text.length,
): number {
  let size = 0;
  const pending: unknown[] = [value];
  while (pending.length > 0 && size <= upTo) {
    const v = pending.pop();
    if (typeof v === 'string') {
      size += measure(v) + 2;
    } else if (Array.isArray(v)) {
      size += 1 + Math.max(1, v.length);
      for (const item of v) pending.push(item);
    } else if (v !== null && typeof v === 'object') {
      size += 1;
      for (const [key, item] of Object.entries(v)) {
        size += measure(key) + 4;
        pending.push(item);
      }
    } else {
      size += String(v).length;
    }
  }
  return size;
}

/** Completion tokens of tool calls: each call's function name and arguments, and its framing. */
export function countToolCallTokens(calls: readonly { name: string; arguments: string }[]): number {
  let total = 0;
  for (const c of calls) total += TOKENS_PER_TOOL + countTokens(c.name) + countTokens(c.arguments);
  return total;
}

/** The text split into its tokens' strings, in order (joined they give back `text`). For short texts. */
export function tokenPieces(text: string): string[] {
  return [...decodeGenerator(encode(text, PLAIN))];
}
