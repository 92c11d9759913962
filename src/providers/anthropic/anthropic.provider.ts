import Anthropic from '@anthropic-ai/sdk';
import {
  assertComplete,
  connectionFailure,
  httpFailure,
  retryAfterMs,
  UpstreamCall,
  wholeAnswer,
  type UpstreamSettings,
} from '../upstream.js';
import {
  ProviderError,
  type CacheControl,
  type ChatMessage,
  type UpstreamEvent,
  type CompletionParams,
  type JsonSchemaObject,
  type Provider,
  type TokenUsage,
} from '../types.js';
import { checkAnthropicRequest } from './anthropic.rules.js';
import { thinkingOf } from './anthropic-thinking.js';
import { parseDataUrl, textOf } from '../messages.js';

const PROVIDER = 'Anthropic';

export interface AnthropicSettings extends UpstreamSettings {
  /** max_tokens is required by the Messages API; this is sent when the request sets none. */
  defaultMaxTokens: number;
}

/** Anthropic's stop reasons in OpenAI's words. */
const FINISH: Record<string, string> = {
  end_turn: 'stop',
  stop_sequence: 'stop',
  max_tokens: 'length',
  model_context_window_exceeded: 'length',
  refusal: 'content_filter',
  tool_use: 'tool_calls',
  pause_turn: 'stop',
};

function classify(err: unknown): ProviderError {
  if (err instanceof Anthropic.APIError && typeof err.status === 'number') {
    return httpFailure(
      PROVIDER,
      err.status,
      err.apiMessage ?? err.message,
      retryAfterMs(err.headers as Headers | undefined),
      err,
    );
  }
  // An `event: error` inside the stream (overloaded_error, api_error) arrives without a status.
  if (err instanceof Anthropic.APIError && !(err instanceof Anthropic.APIConnectionError)) {
    const overloaded = err.type === 'overloaded_error' || err.type === 'rate_limit_error';
    return new ProviderError(
      `${PROVIDER} stream failed: ${err.apiMessage ?? err.message}`,
      overloaded ? 529 : 502,
      true,
      undefined,
      { cause: err },
    );
  }
  return connectionFailure(PROVIDER, err);
}

type MessageCreateBody = Anthropic.MessageCreateParamsStreaming;
type Block = Record<string, unknown>;

/** A client's tool call arguments as the object Anthropic's tool_use input is (checked as JSON by the rules). */
const inputOf = (args: string): unknown => (args.trim() === '' ? {} : JSON.parse(args));

/** An input_schema is a JSON Schema of an object: a schema without a type gets one. */
const inputSchema = (schema: JsonSchemaObject | undefined): JsonSchemaObject =>
  schema === undefined ? { type: 'object', properties: {} } : { type: 'object', ...schema };

const markOf = (c: CacheControl | undefined): { cache_control?: CacheControl } => (c ? { cache_control: c } : {});

/** A message's own mark (LiteLLM's form) on its last block; string content becomes a text block to carry it. */
function withMessageMark(content: string | Block[], c: CacheControl | undefined): string | Block[] {
  if (!c || content.length === 0) return content;
  if (typeof content === 'string') return [{ type: 'text', text: content, cache_control: c }];
  return [...content.slice(0, -1), { ...content[content.length - 1], cache_control: c }];
}

const isMarked = (content: ChatMessage['content']): boolean =>
  Array.isArray(content) && content.some((part) => part.cache_control);

/** A message's text as text blocks, a marked part keeping its own block (the API refuses empty ones). */
function textBlocks(content: ChatMessage['content']): Block[] {
  if (content === null || typeof content === 'string') return content ? [{ type: 'text', text: content }] : [];
  return content.flatMap((part) =>
    part.type === 'text' && part.text ? [{ type: 'text', text: part.text, ...markOf(part.cache_control) }] : [],
  );
}

function userBlocks(content: ChatMessage['content']): string | Block[] {
  if (content === null || typeof content === 'string') return content ?? '';
  return content.map((part) => {
    if (part.type === 'text') return { type: 'text', text: part.text, ...markOf(part.cache_control) };
    const data = parseDataUrl(part.image_url.url);
    const source = data
      ? { type: 'base64', media_type: data.mediaType, data: data.data }
      : { type: 'url', url: part.image_url.url };
    return { type: 'image', source, ...markOf(part.cache_control) };
  });
}

function assistantBlocks(m: ChatMessage): string | Block[] {
  if (!m.tool_calls?.length && !isMarked(m.content)) return textOf(m.content);
  return [
    ...(isMarked(m.content) ? textBlocks(m.content) : textBlocks(textOf(m.content))),
    ...(m.tool_calls ?? []).map((c) => ({
      type: 'tool_use',
      id: c.id,
      name: c.function.name,
      input: inputOf(c.function.arguments),
    })),
  ];
}

/** A tool message as a tool_result block: its text, marked when the message or one of its parts is. */
function toolResult(m: ChatMessage): Block {
  const partMark = Array.isArray(m.content)
    ? m.content.findLast((part) => part.cache_control)?.cache_control
    : undefined;
  return {
    type: 'tool_result',
    tool_use_id: m.tool_call_id,
    content: textOf(m.content),
    ...markOf(m.cache_control ?? partMark),
  };
}

/** user and assistant turns; tool results become tool_result blocks of one user turn. */
function toAnthropicMessages(messages: readonly ChatMessage[]): MessageCreateBody['messages'] {
  const out: { role: 'user' | 'assistant'; content: string | Block[] }[] = [];
  for (const m of messages) {
    if (m.role === 'user') out.push({ role: 'user', content: withMessageMark(userBlocks(m.content), m.cache_control) });
    else if (m.role === 'assistant')
      out.push({ role: 'assistant', content: withMessageMark(assistantBlocks(m), m.cache_control) });
    else if (m.role === 'tool') {
      const result = toolResult(m);
      const last = out[out.length - 1];
      if (last?.role === 'user' && Array.isArray(last.content) && last.content.every((b) => b.type === 'tool_result'))
        last.content.push(result);
      else out.push({ role: 'user', content: [result] });
    }
  }
  return out as MessageCreateBody['messages'];
}

const isSystem = (m: ChatMessage) => m.role === 'system' || m.role === 'developer';

/**
 * The system and developer messages as the top-level `system`: their texts joined by a blank line,
 * or, once one of them carries a cache_control mark, text blocks (each marked part its own), so
 * each mark stays where the client put it.
 */
function systemOf(messages: readonly ChatMessage[]): MessageCreateBody['system'] | undefined {
  const system = messages.filter(isSystem);
  if (system.length === 0) return undefined;
  if (!system.some((m) => m.cache_control || isMarked(m.content)))
    return system.map((m) => textOf(m.content)).join('\n\n');
  const blocks = system.flatMap((m) => withMessageMark(textBlocks(m.content), m.cache_control) as Block[]);
  return blocks as unknown as MessageCreateBody['system'];
}

/**
 * The tool that carries a structured answer (Anthropic's documented way to get JSON: a tool whose
 * input_schema is the answer's schema, which the model is made to call), named after the
 * json_schema, or "json_object".
 */
export function answerToolOf(p: CompletionParams): { name: string; input_schema: JsonSchemaObject } | undefined {
  const format = p.response_format;
  if (!format) return undefined;
  if (format.type === 'json_object') return { name: 'json_object', input_schema: { type: 'object' } };
  return { name: format.json_schema.name, input_schema: inputSchema(format.json_schema.schema) };
}

/**
 * tools and tool_choice in Anthropic's words (required is "any", a named function "tool"; a
 * parallel_tool_calls of false is disable_parallel_tool_use). With response_format the answer tool
 * joins them: forced when no client tool may be called, else the model must call one or the other.
 */
function toolsOf(p: CompletionParams): Pick<MessageCreateBody, 'tools' | 'tool_choice'> {
  const tools: Block[] = (p.tools ?? []).map((t) => ({
    name: t.function.name,
    ...(t.function.description ? { description: t.function.description } : {}),
    input_schema: inputSchema(t.function.parameters),
    ...markOf(t.cache_control),
  }));
  const choice = p.tool_choice ?? (tools.length > 0 ? 'auto' : 'none');
  const answer = answerToolOf(p);
  let toolChoice: Block | undefined =
    typeof choice === 'object'
      ? { type: 'tool', name: choice.function.name }
      : choice === 'required'
        ? { type: 'any' }
        : choice === 'auto'
          ? { type: 'auto' }
          : tools.length > 0
            ? { type: 'none' }
            : undefined;
  let sent = tools;
  if (answer && (choice === 'none' || choice === 'auto')) {
    sent = choice === 'none' ? [answer] : [...tools, answer];
    toolChoice = choice === 'none' ? { type: 'tool', name: answer.name } : { type: 'any' };
  }
  if (toolChoice && p.parallel_tool_calls === false && toolChoice.type !== 'none')
    toolChoice.disable_parallel_tool_use = true;
  const out: Pick<MessageCreateBody, 'tools' | 'tool_choice'> = {};
  if (sent.length > 0) out.tools = sent as unknown as MessageCreateBody['tools'];
  if (toolChoice) out.tool_choice = toolChoice as unknown as MessageCreateBody['tool_choice'];
  return out;
}

/**
 * The Messages API request: system (and developer) messages become the top-level `system`,
 * stop becomes stop_sequences, user becomes metadata.user_id, tools and tool messages become
 * tools, tool_use and tool_result blocks, images image blocks, reasoning_effort thinking
 * (anthropic-thinking.ts), and cache_control marks stay on the blocks and tools they mark, as
 * given. Consecutive turns of one role are sent as they are; the API accepts and merges them.
 * seed has no counterpart and is not sent.
 */
export function toAnthropicRequest(p: CompletionParams, defaultMaxTokens: number): MessageCreateBody {
  const system = systemOf(p.messages);
  const body: MessageCreateBody = {
    model: p.model,
    ...thinkingOf(p, defaultMaxTokens),
    messages: toAnthropicMessages(p.messages),
    stream: true,
    ...toolsOf(p),
  };
  if (system !== undefined) body.system = system;
  if (p.stop?.length) body.stop_sequences = p.stop;
  if (p.user !== undefined) body.metadata = { user_id: p.user };
  return body;
}

/** Anthropic's token counts: a whole message's, or a stream's so far (message_start, then message_delta). */
type AnthropicUsage = Partial<Anthropic.Usage>;

/**
 * Anthropic's counts in OpenAI's meaning: the prompt is the uncached input plus the cache's reads
 * and writes (each priced at its own rate downstream), the completion counts the thinking.
 */
function tokenUsageOf(u: AnthropicUsage): TokenUsage {
  const read = u.cache_read_input_tokens ?? 0;
  const written = u.cache_creation_input_tokens ?? 0;
  const written1h = u.cache_creation?.ephemeral_1h_input_tokens ?? 0;
  const thinking = u.output_tokens_details?.thinking_tokens ?? 0;
  return {
    prompt_tokens: (u.input_tokens ?? 0) + read + written,
    completion_tokens: u.output_tokens ?? 0,
    ...(read ? { cached_tokens: read } : {}),
    ...(written ? { cache_write_tokens: written } : {}),
    ...(written1h ? { cache_write_1h_tokens: written1h } : {}),
    ...(thinking ? { reasoning_tokens: thinking } : {}),
  };
}

/** message_delta's usage over what came before: its counts are cumulative, and null where it has none. */
const withDelta = (u: AnthropicUsage, delta: Anthropic.MessageDeltaUsage): AnthropicUsage => ({
  ...u,
  ...Object.fromEntries(Object.entries(delta).filter(([, v]) => v !== null && v !== undefined)),
});

/**
 * Reads an answer's content blocks into events: text; tool_use blocks as tool calls (numbered in
 * order), except the answer tool's, whose input is the answer's text. Thinking blocks are the
 * model's own notes, not the answer: their deltas (thinking_delta, signature_delta) are not read.
 * One per stream or answer.
 */
class BlockReader {
  private readonly kinds = new Map<number, 'text' | 'call' | 'answer'>();
  private readonly callOf = new Map<number, number>();
  private calls = 0;
  answered = false;
  constructor(private readonly answerTool: string | undefined) {}

  *start(block: number, content: { type: string; id?: string; name?: string }): Generator<UpstreamEvent> {
    if (content.type !== 'tool_use') return void this.kinds.set(block, 'text');
    if (content.name === this.answerTool) {
      this.answered = true;
      return void this.kinds.set(block, 'answer');
    }
    this.kinds.set(block, 'call');
    this.callOf.set(block, this.calls);
    yield {
      type: 'tool_call',
      index: 0,
      call: this.calls++,
      id: content.id ?? '',
      name: content.name ?? '',
      arguments: '',
    };
  }

  *fragment(block: number, json: string): Generator<UpstreamEvent> {
    if (json === '') return;
    if (this.kinds.get(block) === 'answer') yield { type: 'delta', index: 0, content: json };
    else if (this.kinds.get(block) === 'call')
      yield { type: 'tool_call', index: 0, call: this.callOf.get(block)!, arguments: json };
  }

  /** A tool_use stop is tool_calls, unless the only tool used carried the answer. */
  finish(stopReason: string | null): UpstreamEvent {
    const reason =
      stopReason === 'tool_use' && this.calls === 0 ? 'stop' : (FINISH[stopReason ?? 'end_turn'] ?? 'stop');
    return { type: 'finish', index: 0, reason };
  }
}

/**
 * Claude through the official SDK, which speaks API version 2026-10-21. That version removed the
 * sampling parameters (temperature, top_p, top_k: a 400 even at their defaults), so a request's
 * temperature or top_p is accepted only at 1, where leaving it out samples identically.
 */
export class AnthropicProvider implements Provider {
  readonly name = 'anthropic';
  /** The Messages API answers one choice per call. */
  readonly maxChoices = 1;
  private readonly client: Anthropic;

  constructor(private readonly settings: AnthropicSettings) {
    this.client = new Anthropic({
      apiKey: settings.apiKey,
      ...(settings.baseUrl ? { baseURL: settings.baseUrl } : {}),
      maxRetries: 0,
      timeout: settings.timeoutMs,
    });
  }

  check(p: CompletionParams): void {
    checkAnthropicRequest(p);
  }

  async *stream(p: CompletionParams, signal: AbortSignal): AsyncIterable<UpstreamEvent> {
    const call = new UpstreamCall(signal, this.settings.timeoutMs);
    const finished = new Set<number>();
    let usage: AnthropicUsage = {};
    let stopReason: string | null = null;
    let model: string | undefined;
    try {
      const stream = await this.client.messages.create(toAnthropicRequest(p, this.settings.defaultMaxTokens), {
        signal: call.signal,
      });
      const blocks = new BlockReader(answerToolOf(p)?.name);
      for await (const event of stream) {
        call.touch();
        switch (event.type) {
          case 'message_start':
            model = event.message.model || undefined;
            usage = event.message.usage;
            break;
          case 'content_block_start':
            yield* blocks.start(event.index, event.content_block);
            break;
          case 'content_block_delta':
            if (event.delta.type === 'text_delta' && event.delta.text)
              yield { type: 'delta', index: 0, content: event.delta.text };
            else if (event.delta.type === 'input_json_delta')
              yield* blocks.fragment(event.index, event.delta.partial_json);
            break;
          case 'message_delta':
            usage = withDelta(usage, event.usage);
            if (event.delta.stop_reason) stopReason = event.delta.stop_reason;
            break;
          case 'message_stop':
            finished.add(0);
            yield blocks.finish(stopReason);
            yield { type: 'usage', ...tokenUsageOf(usage), model };
            break;
          default:
            break;
        }
      }
      assertComplete(PROVIDER, 1, finished);
      call.complete();
    } catch (err) {
      throw call.failure(err, PROVIDER, classify);
    } finally {
      call.done();
    }
  }

  /** One whole-answer call (stream: false) for a client that does not stream; see Provider.complete. */
  async *complete(p: CompletionParams, signal: AbortSignal): AsyncIterable<UpstreamEvent> {
    const message = await wholeAnswer(signal, this.settings.timeoutMs, PROVIDER, classify, (s) =>
      this.client.messages.create(
        { ...toAnthropicRequest(p, this.settings.defaultMaxTokens), stream: false },
        { signal: s },
      ),
    );
    const blocks = new BlockReader(answerToolOf(p)?.name);
    for (const [i, block] of message.content.entries()) {
      if (block.type === 'text') {
        if (block.text) yield { type: 'delta', index: 0, content: block.text };
      } else if (block.type === 'tool_use') {
        yield* blocks.start(i, block);
        yield* blocks.fragment(i, JSON.stringify(block.input));
      }
    }
    yield blocks.finish(message.stop_reason);
    yield { type: 'usage', ...tokenUsageOf(message.usage), model: message.model || undefined };
  }
}
