// One choice of an answer as it is put together: its text and its tool calls, from the provider's
// events (the worker) or from the chunks a stream carried (retrieval, and counting what an
// interrupted stream delivered). One shape, so every reader assembles tool calls the same way.
import { countTokens, countToolCallTokens } from '../../providers/tokenizer.js';
import type { UpstreamEvent } from '../../providers/types.js';

export interface AssembledCall {
  id: string;
  name: string;
  arguments: string;
}

export interface ChoiceState {
  text: string;
  /** Its first chunk went out (it carried role: assistant). */
  started: boolean;
  finish: string | null;
  /** By their index within the choice. */
  calls: AssembledCall[];
}

export const newChoice = (): ChoiceState => ({ text: '', started: false, finish: null, calls: [] });

/** A chunk's `tool_calls` entry, as OpenAI streams them. */
interface CallDelta {
  index: number;
  id?: string;
  type?: 'function';
  function?: { name?: string; arguments?: string };
}

function addCall(choice: ChoiceState, d: CallDelta): void {
  const call = (choice.calls[d.index] ??= { id: '', name: '', arguments: '' });
  if (d.id) call.id = d.id;
  if (d.function?.name) call.name += d.function.name;
  call.arguments += d.function?.arguments ?? '';
}

/**
 * Adds a provider's tool_call event to the choice and returns the chunk delta that streams it:
 * the first piece of a call carries its id, type and name (OpenAI's shape), later ones arguments.
 */
export function takeToolCall(choice: ChoiceState, ev: Extract<UpstreamEvent, { type: 'tool_call' }>): object {
  const delta: CallDelta = { index: ev.call };
  if (ev.id !== undefined || ev.name !== undefined) {
    delta.id = ev.id ?? '';
    delta.type = 'function';
    delta.function = { name: ev.name ?? '', arguments: ev.arguments };
  } else {
    delta.function = { arguments: ev.arguments };
  }
  addCall(choice, delta);
  const first = !choice.started;
  choice.started = true;
  return first ? { role: 'assistant', content: null, tool_calls: [delta] } : { tool_calls: [delta] };
}

/** Adds one chunk's delta (content and tool_calls) to the choice. */
export function takeDelta(
  choice: ChoiceState,
  delta: { content?: string | null; tool_calls?: CallDelta[] } | undefined,
): void {
  if (delta?.content) choice.text += delta.content;
  for (const d of delta?.tool_calls ?? []) addCall(choice, d);
}

/** The parts of a Responses stream event that carry the answer (see presenters/response.presenter.ts). */
export interface ResponseStreamEvent {
  type: string;
  delta?: string;
  item?: { type: string; call_id?: string; name?: string };
}

/** Adds one Responses stream event to the choice: text, a function call's start, or its arguments. */
export function takeResponseEvent(choice: ChoiceState, ev: ResponseStreamEvent): void {
  if (ev.type === 'response.output_text.delta') choice.text += ev.delta ?? '';
  else if (ev.type === 'response.output_item.added' && ev.item?.type === 'function_call')
    choice.calls.push({ id: ev.item.call_id ?? '', name: ev.item.name ?? '', arguments: '' });
  else if (ev.type === 'response.function_call_arguments.delta') {
    const call = choice.calls.at(-1);
    if (call) call.arguments += ev.delta ?? '';
  }
}

/** The assistant message of a finished choice, in OpenAI's shape: content null when it is only tool calls. */
export function messageOf(choice: ChoiceState): Record<string, unknown> {
  const calls = choice.calls.filter(Boolean);
  if (calls.length === 0) return { role: 'assistant', content: choice.text, refusal: null };
  return {
    role: 'assistant',
    content: choice.text === '' ? null : choice.text,
    refusal: null,
    tool_calls: calls.map((c) => ({ id: c.id, type: 'function', function: { name: c.name, arguments: c.arguments } })),
  };
}

/** Completion tokens of what the choice holds: its text, and its tool calls' names and arguments. */
export function tokensOf(choice: Pick<ChoiceState, 'text' | 'calls'>): number {
  return countTokens(choice.text) + countToolCallTokens(choice.calls.filter(Boolean));
}

/** The names of the tools the choices called, for tracing (never their arguments). */
export function calledTools(choices: readonly Pick<ChoiceState, 'calls'>[]): string[] {
  return choices.flatMap((c) => c.calls.filter(Boolean).map((call) => call.name));
}
