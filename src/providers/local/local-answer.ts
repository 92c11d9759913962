// The local model's answers: deterministic in (model, messages, seed, index), plausible prose about
// the last user message, a tool call or JSON. Pure functions, so they run on the event loop (prose)
// or on a compute thread (JSON, see compute-tasks.ts) with the same result.
import { createHash } from 'node:crypto';
import { textOf } from '../messages.js';
import { tokenPieces } from '../tokenizer.js';
import type { ChatMessage, CompletionParams } from '../types.js';
import { composeToolCall, jsonAnswer, toolToCall, type PlannedCall } from './local-tools.js';

// ---- deterministic text --------------------------------------------------------------------

/**
 * mulberry32: a tiny, well-distributed PRNG for reproducibility, not secrecy (the benchmark's
 * open-loop arrivals use it too, so every side gets the same schedule).
 */
export function prng(seed: number): () => number {
  let a = seed >>> 0;
  return () => {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

function seedOf(params: CompletionParams, index: number): number {
  const h = createHash('sha256');
  h.update(params.model).update('\0').update(String(index));
  // With a seed the answer depends on it; without one, as before, on the messages alone.
  if (params.seed !== undefined) h.update('\0seed\0').update(String(params.seed));
  for (const m of params.messages) {
    h.update('\0').update(m.role).update('\0').update(textOf(m.content));
    for (const call of m.tool_calls ?? []) h.update('\0').update(call.function.name).update(call.function.arguments);
  }
  return h.digest().readUInt32BE(0);
}

const STOPWORDS = new Set(
  'about above after again against also because been before being below between both cannot could does doing down during each from further have having here hers herself himself into itself just more most myself once only other ought ours ourselves over same should some such than that their theirs them themselves then there these they this those through under until very what when where which while whom with would your yours yourself yourselves please tell explain know want need like make give write show help thanks thank could hello dear'.split(
    ' ',
  ),
);

/**
 * The subject of the last user message: its longest non-trivial word with the non-trivial words
 * right beside it ("quantum entanglement"). ASCII only, so every token of the answer decodes alone.
 */
export function topicOf(messages: readonly ChatMessage[]): string {
  const last = [...messages].reverse().find((m) => m.role === 'user') ?? messages[messages.length - 1];
  const words = (
    textOf(last?.content ?? null)
      .slice(0, 4000)
      .match(/[A-Za-z][A-Za-z'-]*/g) ?? []
  ).map((w) => w.toLowerCase());
  const salient = (w: string | undefined) =>
    w !== undefined && w.length >= 4 && w.length <= 20 && !w.includes("'") && !STOPWORDS.has(w);
  let best = -1;
  words.forEach((w, i) => {
    if (salient(w) && (best < 0 || w.length > words[best]!.length)) best = i;
  });
  if (best < 0) return 'this question';
  let from = best;
  let to = best;
  while (to - from < 2 && salient(words[from - 1])) from -= 1;
  while (to - from < 2 && salient(words[to + 1])) to += 1;
  return words.slice(from, to + 1).join(' ');
}

const an = (word: string): string => `${/^[aeiou]/.test(word) ? 'an' : 'a'} ${word}`;

const OPENERS = [
  'Sure.',
  'Good question.',
  'Happy to help.',
  'Here is a short answer.',
  "Let's take it step by step.",
  'In short:',
];
const ADJ = [
  'main',
  'underlying',
  'practical',
  'overall',
  'typical',
  'important',
  'simple',
  'basic',
  'usual',
  'key',
  'common',
];
const NOUNS = [
  'approach',
  'result',
  'process',
  'example',
  'detail',
  'structure',
  'method',
  'pattern',
  'idea',
  'step',
  'constraint',
  'trade-off',
  'input',
  'context',
  'goal',
  'assumption',
];
const VPS = [
  'depends on the context',
  'changes the outcome',
  'makes the rest easier',
  'needs a careful check',
  'stays the same in most cases',
  'becomes much simpler',
  'shapes the final result',
  'affects how well it works',
  'reduces the risk of mistakes',
  'is worth testing early',
  'tends to matter more than expected',
];
const SENTENCES: ((w: Words) => string)[] = [
  (w) => `The key point about ${w.topic} is that ${w.np()} ${w.vp()}.`,
  (w) => `In practice, ${w.np()} ${w.vp()} when ${w.np()} ${w.vp()}.`,
  (w) => `A common mistake is to assume that ${w.np()} ${w.vp()}.`,
  (w) => `It helps to think of ${w.topic} as ${an(w.adj())} ${w.noun()} that ${w.vp()}.`,
  (w) => `Generally, ${w.np()} ${w.vp()}, which is why ${w.np()} matters.`,
  (w) => `If you are unsure, start with the ${w.adj()} ${w.noun()} and check whether it ${w.vp()}.`,
  (w) => `Most people find that ${w.np()} ${w.vp()} once ${w.np()} is clear.`,
  (w) => `For ${w.topic}, ${w.np()} usually ${w.vp()}.`,
];
const CLOSERS = [
  'I hope this helps.',
  'Let me know if you would like more detail.',
  'Feel free to ask a follow-up question.',
  'Would you like a worked example?',
];

interface Words {
  topic: string;
  adj(): string;
  noun(): string;
  np(): string;
  vp(): string;
}

/** A plausible, deterministic answer of roughly `target` tokens, ending at a sentence. */
function compose(rand: () => number, topic: string, target: number): string {
  const pick = <T>(xs: readonly T[]): T => xs[Math.floor(rand() * xs.length)]!;
  const w: Words = {
    topic,
    adj: () => pick(ADJ),
    noun: () => pick(NOUNS),
    np: () => `the ${pick(ADJ)} ${pick(NOUNS)}`,
    vp: () => pick(VPS),
  };
  let text = pick(OPENERS);
  let words = text.split(' ').length;
  let inParagraph = 0;
  let breakNext = false;
  // Words are a close, cheap proxy for tokens in this vocabulary (about 1.15 tokens per word).
  const targetWords = Math.round(target / 1.15);
  const listAt = target > 70 && rand() < 0.4 ? 2 : -1;
  let sentences = 0;
  while (words < targetWords - 8) {
    let s: string;
    if (sentences === listAt) {
      s = `Here are the steps:\n\n1. Identify the ${w.adj()} ${w.noun()}.\n2. Check that it ${w.vp()}.\n3. Adjust the ${w.noun()} and compare the result.`;
      breakNext = true;
    } else {
      s = pick(SENTENCES)(w);
    }
    const sep = breakNext || inParagraph >= 2 + Math.floor(rand() * 3) ? '\n\n' : ' ';
    if (sep === '\n\n') inParagraph = 0;
    breakNext = sentences === listAt;
    text += sep + s;
    inParagraph += 1;
    sentences += 1;
    words += s.split(/\s+/).length;
  }
  return `${text}${breakNext ? '\n\n' : ' '}${pick(CLOSERS)}`;
}

export interface PlannedChoice {
  /** The choice's tokens as strings, in order: its text, or its tool call's arguments. */
  pieces: string[];
  finish: 'stop' | 'length' | 'tool_calls';
  /** The tool it calls, when it calls one (its pieces are the arguments). */
  call?: PlannedCall;
}

/**
 * The full answer of one choice: deterministic in (model, messages, seed, index). With tools it
 * calls one when the last message is the user's (or tool_choice demands a call), with arguments
 * made to satisfy the tool's JSON Schema; after a tool's result it answers in text. With
 * response_format it answers JSON (matching the json_schema). Text is cut by stop and max_tokens.
 * JSON longer than `maxAnswerChars` throws AnswerTooLarge.
 */
export function planChoice(params: CompletionParams, index: number, maxAnswerChars = Infinity): PlannedChoice {
  const rand = prng(seedOf(params, index));
  const call = toolToCall(params, rand);
  if (call) {
    const planned = composeToolCall(call, rand, index, params.tools?.indexOf(call) ?? 0);
    checkSize(planned.arguments, maxAnswerChars);
    return cutAt({ pieces: tokenPieces(planned.arguments), finish: 'tool_calls', call: planned }, params.max_tokens);
  }
  const target = 30 + Math.floor(rand() * 91);
  const prose = () => compose(rand, topicOf(params.messages), target);
  const json = params.response_format ? jsonAnswer(params.response_format, rand, prose) : undefined;
  if (json !== undefined) {
    checkSize(json, maxAnswerChars);
    return cutAt({ pieces: tokenPieces(json), finish: 'stop' }, params.max_tokens);
  }
  const lastTool = lastToolResult(params.messages);
  let text = (lastTool ? `Going by what ${lastTool} returned: ` : '') + prose();
  // A stop sequence ends the text just before it, as OpenAI does (the sequence is not returned).
  let cut = -1;
  for (const s of params.stop ?? []) {
    if (s === '') continue;
    const at = text.indexOf(s);
    if (at >= 0 && (cut < 0 || at < cut)) cut = at;
  }
  if (cut >= 0) text = text.slice(0, cut);
  return cutAt({ pieces: text === '' ? [] : tokenPieces(text), finish: 'stop' }, params.max_tokens);
}

/** An answer longer than the local model writes (LOCAL_MODEL_MAX_ANSWER_CHARS), found before it is tokenized. */
export class AnswerTooLarge extends Error {
  constructor(readonly chars: number) {
    super(`the answer would be ${chars} characters long`);
    this.name = 'AnswerTooLarge';
  }
}

function checkSize(answer: string, maxChars: number): void {
  if (answer.length > maxChars) throw new AnswerTooLarge(answer.length);
}

/** The answer cut at max_tokens (finish length), as a real model is. */
function cutAt(choice: PlannedChoice, maxTokens: number | undefined): PlannedChoice {
  if (maxTokens === undefined || choice.pieces.length <= maxTokens) return choice;
  return { ...choice, pieces: choice.pieces.slice(0, maxTokens), finish: 'length' };
}

/** The name of the tool whose result is the last message, if it is one. */
function lastToolResult(messages: readonly ChatMessage[]): string | undefined {
  const last = messages[messages.length - 1];
  if (last?.role !== 'tool') return undefined;
  for (const m of messages) for (const c of m.tool_calls ?? []) if (c.id === last.tool_call_id) return c.function.name;
  return 'the tool';
}
