// How a completion's answer is put on the wire: one presenter per wire format, fed by the one
// loop that produces the tokens (job/upstream-loop.ts). The worker frames everything the client
// gets, so the relay log holds exactly those bytes and a resumed stream replays them as they were.
import type { UpstreamEvent } from '../../../providers/types.js';
import type { ChoiceState } from '../choices.js';
import type { RelayError } from '../../relay/protocol.js';

export type ToolCallEvent = Extract<UpstreamEvent, { type: 'tool_call' }>;

/**
 * The usage as the ledger has it, in chat's names (OpenAI's, with OpenRouter's cache_write_tokens
 * and cost in USD): prompt_tokens counts every prompt token, cached and written ones included.
 */
export interface AnswerUsage {
  prompt_tokens: number;
  completion_tokens: number;
  total_tokens: number;
  prompt_tokens_details: { cached_tokens: number; cache_write_tokens: number };
  completion_tokens_details: { reasoning_tokens: number };
  cost: number;
}

/** What an interrupted answer's client was sent, read from its relay log, and the usage billed for it. */
export interface DeliveredAnswer {
  choices: readonly ChoiceState[];
  usage: AnswerUsage;
}

export interface AnswerPresenter {
  /** A stream's piece of text, just added to `choice`. */
  text(index: number, choice: ChoiceState, content: string): void;
  /**
   * A stream's piece of a tool call, just added to `choice`; `delta` is its chat chunk delta and
   * `first` whether it is the first thing the choice carries.
   */
  toolCall(index: number, choice: ChoiceState, ev: ToolCallEvent, delta: object, first: boolean): void;
  /** A stream's choice ended (its reason is in `choice.finish`). */
  finish(index: number, choice: ChoiceState): void;
  /** What ends a completed stream: its last events, numbered (may be ''), the `done` message's payload. */
  done(choices: readonly ChoiceState[], usage: AnswerUsage): string;
  /** The whole answer of a request that does not stream: the `final` message's body. */
  body(choices: readonly ChoiceState[], usage: AnswerUsage): string;
  /** The `error` message's payload of a request that failed or was stopped. */
  errorPayload(error: RelayError, choices: readonly ChoiceState[], usage: AnswerUsage): string;
  /**
   * The answer as the object its client last saw, once `done`, `body` or `errorPayload` framed it, for a
   * wire format that stores answers (the Responses API's Response); undefined otherwise.
   */
  finalObject(): Record<string, unknown> | undefined;
}
