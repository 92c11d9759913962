// A completion as the Responses API's Response (POST /v1/responses), streamed as OpenAI streams it:
// `event: <type>` and `data: {…, "sequence_number": n}` from 0, no [DONE]. The stream opens
// (response.created, response.in_progress) with its first output, so a failure before any output
// still gets its own HTTP status, as a chat stream's does; each message is output_item.added,
// content_part.added, output_text.delta…, output_text.done, content_part.done, output_item.done;
// each function call output_item.added, function_call_arguments.delta…, .done, output_item.done;
// and it ends with exactly one of response.completed, response.incomplete or response.failed, each
// carrying the usage the ledger records.
import { randomIdPart } from '../../../ids.js';
import type { ChoiceState } from '../choices.js';
import type { CompletionJob } from '../../relay/completion-job.js';
import type { RelayError } from '../../relay/protocol.js';
import type { RelayPublisher } from '../../relay/publisher.js';
import { eventData } from '../sse.js';
import type { AnswerPresenter, AnswerUsage, DeliveredAnswer, ToolCallEvent } from './answer-presenter.js';

type Status = 'completed' | 'incomplete' | 'failed' | 'cancelled';

interface MessageItem {
  type: 'message';
  id: string;
  text: string;
}

interface CallItem {
  type: 'function_call';
  id: string;
  call_id: string;
  name: string;
  arguments: string;
  /** The call's number within the choice, as the provider's events number it. */
  call: number;
}

type Item = MessageItem | CallItem;

const messageId = (): string => `msg_${randomIdPart(24)}`;
const callItemId = (): string => `fc_${randomIdPart(24)}`;

/** The Responses usage of the ledger's usage, with this service's `cost` as in chat's usage. */
export function responseUsage(usage: AnswerUsage): Record<string, unknown> {
  return {
    input_tokens: usage.prompt_tokens,
    input_tokens_details: {
      cached_tokens: usage.prompt_tokens_details.cached_tokens,
      cache_write_tokens: usage.prompt_tokens_details.cache_write_tokens,
    },
    output_tokens: usage.completion_tokens,
    output_tokens_details: { reasoning_tokens: usage.completion_tokens_details.reasoning_tokens },
    total_tokens: usage.total_tokens,
    cost: usage.cost,
  };
}

/** How the answer ended, in the Responses API's words: a cut answer is incomplete, and says why. */
function endOf(finish: string | null): { status: Status; incomplete_details: { reason: string } | null } {
  if (finish === 'length') return { status: 'incomplete', incomplete_details: { reason: 'max_output_tokens' } };
  if (finish === 'content_filter') return { status: 'incomplete', incomplete_details: { reason: 'content_filter' } };
  return { status: 'completed', incomplete_details: null };
}

function itemJson(item: Item, status: string): Record<string, unknown> {
  if (item.type === 'message')
    return {
      id: item.id,
      type: 'message',
      status,
      content: status === 'in_progress' ? [] : [outputText(item.text)],
      role: 'assistant',
    };
  return {
    id: item.id,
    type: 'function_call',
    status,
    arguments: item.arguments,
    call_id: item.call_id,
    name: item.name,
  };
}

const outputText = (text: string) => ({ type: 'output_text', annotations: [], logprobs: [], text });

/** The Response object: the job's head and echoed settings, then what this moment of it holds. */
function responseObject(
  job: CompletionJob,
  state: {
    status: Status | 'in_progress' | 'queued';
    output: Record<string, unknown>[];
    usage: AnswerUsage | undefined;
    error?: { code: string; message: string } | null;
    incomplete_details?: { reason: string } | null;
  },
): Record<string, unknown> {
  const echo = job.wire?.echo ?? {};
  return {
    id: job.id,
    object: 'response',
    created_at: job.created,
    status: state.status,
    error: state.error ?? null,
    incomplete_details: state.incomplete_details ?? null,
    model: job.model.id,
    output: state.output,
    ...echo,
    tools: (job.params.tools ?? []).map((t) => ({
      type: 'function',
      name: t.function.name,
      description: t.function.description ?? null,
      parameters: t.function.parameters ?? null,
      strict: t.function.strict ?? null,
    })),
    // Known only at the end: an in-progress Response has none (OpenAI's schema has no null for it).
    ...(state.usage ? { usage: responseUsage(state.usage) } : {}),
  };
}

/** A Response as it stands before any output: `queued` (a background response just admitted) or `in_progress`. */
export function startingResponse(job: CompletionJob, status: 'queued' | 'in_progress'): Record<string, unknown> {
  return responseObject(job, { status, output: [], usage: undefined });
}

/**
 * A background response that ended with no answer framed: failed with its error, or cancelled.
 * Ended by a take-over after its worker died mid-answer, it holds what its stream delivered and the
 * usage billed for it (`delivered`); otherwise nothing was produced, and it has no output or usage.
 */
export function endedResponse(
  job: CompletionJob,
  status: 'failed' | 'cancelled',
  error: RelayError,
  delivered?: DeliveredAnswer,
): Record<string, unknown> {
  const items = delivered ? itemsOf(delivered.choices[0]) : [];
  return responseObject(job, {
    status,
    output: items.map((item, i) => itemJson(item, i === items.length - 1 ? 'incomplete' : 'completed')),
    usage: delivered?.usage,
    error: status === 'failed' ? failureOf(error) : null,
  });
}

/**
 * The Response a stream's end carries (its response.completed or response.incomplete event), read
 * back from the relay log by a take-over whose worker died before storing it.
 */
export function responseInEnd(events: string): Record<string, unknown> | undefined {
  const last = eventData(events).at(-1);
  return last ? (JSON.parse(last) as { response?: Record<string, unknown> }).response : undefined;
}

/** The output items of a finished choice: its text as a message (also when it is empty and no call was made), then its calls. */
function itemsOf(choice: ChoiceState | undefined): Item[] {
  const calls = (choice?.calls ?? []).filter(Boolean);
  const items: Item[] = [];
  if ((choice?.text ?? '') !== '' || calls.length === 0)
    items.push({ type: 'message', id: messageId(), text: choice?.text ?? '' });
  calls.forEach((c, call) =>
    items.push({ type: 'function_call', id: callItemId(), call_id: c.id, name: c.name, arguments: c.arguments, call }),
  );
  return items;
}

/** A Response's status for its failure code: OpenAI's codes, the service's own named in the message. */
function failureOf(error: RelayError): { code: string; message: string } {
  const code = error.error.code === 'upstream_rate_limited' ? 'rate_limit_exceeded' : 'server_error';
  return { code, message: `${error.error.code ?? error.error.type}: ${error.error.message}` };
}

export function responsePresenter(job: CompletionJob, publisher: RelayPublisher): AnswerPresenter {
  return new ResponsePresenter(job, publisher);
}

type EndExtra = { error?: { code: string; message: string }; incomplete_details?: { reason: string } | null };

class ResponsePresenter implements AnswerPresenter {
  private readonly items: Item[] = [];
  private open: Item | undefined;
  private opened = false;
  // The head of every text delta of the open message, serialised once per message.
  private deltaHead = '';
  // The Response the end framed (completed, incomplete or failed after output), kept for storing.
  private final: Record<string, unknown> | undefined;

  constructor(
    private readonly job: CompletionJob,
    private readonly publisher: RelayPublisher,
  ) {}

  finalObject(): Record<string, unknown> | undefined {
    return this.final;
  }

  text(_index: number, choice: ChoiceState, content: string): void {
    choice.started = true;
    const urgent = !this.opened;
    this.opening();
    if (this.open?.type !== 'message') {
      this.closeNow('completed');
      this.add({ type: 'message', id: messageId(), text: '' });
    }
    const item = this.open as MessageItem;
    item.text += content;
    this.publisher.sse(
      `${this.deltaHead}${JSON.stringify(content)},"sequence_number":${this.publisher.nextEventId - 1}}\n\n`,
      urgent,
    );
  }

  toolCall(_index: number, choice: ChoiceState, ev: ToolCallEvent): void {
    const urgent = !this.opened;
    this.opening();
    const call = choice.calls[ev.call]!;
    if (this.open?.type !== 'function_call' || this.open.call !== ev.call) {
      this.closeNow('completed');
      this.add({
        type: 'function_call',
        id: callItemId(),
        call_id: call.id,
        name: call.name,
        arguments: '',
        call: ev.call,
      });
    }
    const item = this.open as CallItem;
    if (ev.arguments === '') return;
    item.arguments += ev.arguments;
    this.emit(
      'response.function_call_arguments.delta',
      { item_id: item.id, output_index: this.items.length - 1, delta: ev.arguments },
      urgent,
    );
  }

  finish(): void {
    // The end events carry the finish; nothing is sent before the usage is known.
  }

  done(choices: readonly ChoiceState[], usage: AnswerUsage): string {
    const { status, incomplete_details } = endOf(choices[0]?.finish ?? null);
    return this.ending(status === 'completed' ? 'response.completed' : 'response.incomplete', status, usage, {
      incomplete_details,
    });
  }

  body(choices: readonly ChoiceState[], usage: AnswerUsage): string {
    const { status, incomplete_details } = endOf(choices[0]?.finish ?? null);
    const all = itemsOf(choices[0]);
    const itemStatus = status === 'completed' ? 'completed' : 'incomplete';
    const output = all.map((item, i) => itemJson(item, i === all.length - 1 ? itemStatus : 'completed'));
    this.final = responseObject(this.job, { status, output, usage, incomplete_details });
    return JSON.stringify(this.final);
  }

  errorPayload(error: RelayError, _choices: readonly ChoiceState[], usage: AnswerUsage): string {
    // Before any output the failure is the HTTP answer itself (the web tier has sent nothing).
    // A background response's client was answered at admission: its end is always a Response,
    // kept in the store for its retrieval.
    const background = this.job.wire?.background === true;
    if (!this.job.stream || (!this.opened && !background)) return JSON.stringify(error);
    const events = this.ending('response.failed', 'failed', usage, { error: failureOf(error) });
    // Stopped by POST /v1/responses/{id}/cancel: OpenAI's status for it (its stream has no
    // event of its own for it, and ends as failed).
    if (background && error.error.code === 'request_cancelled')
      this.final = { ...this.final, status: 'cancelled', error: null };
    return JSON.stringify({ ...error, events } satisfies RelayError);
  }

  /** One event, numbered: its sequence number counts from 0 where the `id:` lines count from 1. */
  private frame(type: string, fields: Record<string, unknown>): string {
    return `event: ${type}\ndata: ${JSON.stringify({ type, ...fields, sequence_number: this.publisher.nextEventId - 1 })}\n\n`;
  }

  private emit(type: string, fields: Record<string, unknown>, urgent = true): void {
    this.publisher.sse(this.frame(type, fields), urgent);
  }

  /** An event of the end, numbered for the payload of the last message rather than published now. */
  private last(type: string, fields: Record<string, unknown>): string {
    return this.publisher.numbered(this.frame(type, fields));
  }

  /**
   * The two events that open the stream, response.created and response.in_progress, each as
   * frame() frames it: both carry the same in-progress Response, serialised once for the two.
   */
  private openingFrames(out: (event: string) => void): void {
    const response = JSON.stringify(responseObject(this.job, { status: 'in_progress', output: [], usage: undefined }));
    for (const type of ['response.created', 'response.in_progress'])
      out(
        `event: ${type}\ndata: {"type":"${type}","response":${response},"sequence_number":${this.publisher.nextEventId - 1}}\n\n`,
      );
  }

  private opening(): void {
    if (this.opened) return;
    this.opened = true;
    this.openingFrames((event) => this.publisher.sse(event, true));
  }

  private add(item: Item): void {
    this.open = item;
    this.items.push(item);
    const output_index = this.items.length - 1;
    this.emit('response.output_item.added', { output_index, item: itemJson(item, 'in_progress') });
    if (item.type === 'message') {
      this.emit('response.content_part.added', {
        item_id: item.id,
        output_index,
        content_index: 0,
        part: outputText(''),
      });
      this.deltaHead = `event: response.output_text.delta\ndata: {"type":"response.output_text.delta","item_id":"${item.id}","output_index":${output_index},"content_index":0,"logprobs":[],"delta":`;
    }
  }

  /** Closes the open item with its done events, framed by `out` (published, or kept for the end). */
  private close(status: string, out: (type: string, fields: Record<string, unknown>) => void): void {
    const item = this.open;
    if (!item) return;
    this.open = undefined;
    const output_index = this.items.indexOf(item);
    if (item.type === 'message') {
      const base = { item_id: item.id, output_index, content_index: 0 };
      out('response.output_text.done', { ...base, text: item.text, logprobs: [] });
      out('response.content_part.done', { ...base, part: outputText(item.text) });
    } else {
      out('response.function_call_arguments.done', {
        item_id: item.id,
        output_index,
        name: item.name,
        arguments: item.arguments,
      });
    }
    out('response.output_item.done', { output_index, item: itemJson(item, status) });
  }

  private closeNow(status: string): void {
    this.close(status, (type, fields) => this.emit(type, fields));
  }

  /** The closing events and the terminal one, as the payload of the stream's last message. */
  private ending(type: string, state: Status, usage: AnswerUsage, extra: EndExtra): string {
    let out = '';
    if (!this.opened) {
      this.opened = true;
      this.openingFrames((event) => (out += this.publisher.numbered(event)));
    }
    if (this.items.length === 0) out += this.emptyMessage();
    const itemStatus = state === 'completed' ? 'completed' : 'incomplete';
    this.close(itemStatus, (t, f) => (out += this.last(t, f)));
    const output = this.items.map((item) => itemJson(item, item === this.items.at(-1) ? itemStatus : 'completed'));
    const response = responseObject(this.job, { status: state, output, usage, ...extra });
    this.final = response;
    return out + this.last(type, { response });
  }

  /** An empty answer is still a message, as OpenAI answers it: opened here, for the end to close. */
  private emptyMessage(): string {
    const item: MessageItem = { type: 'message', id: messageId(), text: '' };
    this.items.push(item);
    let out = this.last('response.output_item.added', { output_index: 0, item: itemJson(item, 'in_progress') });
    out += this.last('response.content_part.added', {
      item_id: item.id,
      output_index: 0,
      content_index: 0,
      part: outputText(''),
    });
    this.open = item;
    return out;
  }
}
