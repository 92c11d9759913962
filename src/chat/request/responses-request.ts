// A Responses API request (POST /v1/responses) as the chat completion request the job already
// carries: input items become messages, instructions a system message, flat function tools chat
// tools, text.format the response_format, max_output_tokens max_completion_tokens, reasoning.effort
// reasoning_effort. One engine, two wire formats: the job says which one to frame the answer in
// (ResponsesWire), and the chat rules' refusals are named at the Responses field they came from
// (responsesLoc).
import { AppError, validationError, type ValidationIssue } from '../../errors.js';
import { randomIdPart } from '../../ids.js';
import type {
  ChatCompletionRequest,
  ContentPart,
  RequestMessage,
  RequestTool,
  ResponseFormat,
  ToolChoice,
} from './chat.schema.js';
import type { CreateResponseRequest, InputItem, InputPart, TextFormat } from './responses.schema.js';
import type { ResponsesWire } from '../relay/completion-job.js';

/** The items a stored response continues from (previous_response_id): its context, then its output. */
export type PriorItems = InputItem[];

export type Loc = (string | number)[];

/** Where a chat message came from: its item (or instructions, or the input string), and its calls' items. */
interface MessageSource {
  at: Loc;
  /** The field of the item that became the message's content: `content`, or a call output's `output`. */
  contentField: string | undefined;
  calls: Loc[];
}

export interface TranslatedRequest {
  chat: ChatCompletionRequest;
  wire: ResponsesWire;
  /** The Responses location of a chat request location (['body', 'messages', 2, 'content'] → ['body', 'input', 1, 'content']). */
  locOf: (loc: Loc) => Loc;
}

const KNOWN_FIELDS = new Set([
  'model',
  'input',
  'instructions',
  'tools',
  'tool_choice',
  'parallel_tool_calls',
  'text',
  'max_output_tokens',
  'temperature',
  'top_p',
  'reasoning',
  'stream',
  'store',
  'background',
  'previous_response_id',
  'metadata',
  'user',
]);

/**
 * Fields OpenAI's clients send that change nothing in the answer: accepted with the values that
 * mean so, refused (400) with any other. Null always means "not set".
 */
const HARMLESS_FIELDS: Record<string, (v: unknown) => boolean> = {
  // What extra data to include: there is none beyond the answer itself.
  include: (v) => Array.isArray(v),
  truncation: (v) => v === 'disabled',
  service_tier: (v) => v === 'auto' || v === 'default',
  prompt_cache_key: (v) => typeof v === 'string',
  safety_identifier: (v) => typeof v === 'string',
  stream_options: (v) => typeof v === 'object',
  top_logprobs: (v) => v === 0,
  max_tool_calls: () => false,
};

const unsupported = (param: string, message: string, code = 'unsupported_parameter'): AppError =>
  new AppError('invalid_request', message, { code, param });

const missing = (loc: Loc): ValidationIssue => ({ loc: ['body', ...loc], msg: 'Field required', type: 'missing' });

/** OpenAI's way of naming a location: input[2].content[0].type. */
export function paramName(loc: Loc): string {
  return loc.map((p, i) => (typeof p === 'number' ? `[${p}]` : i === 0 ? p : `.${p}`)).join('');
}

function refuseUnknownFields(body: Record<string, unknown>): void {
  for (const [field, value] of Object.entries(body)) {
    if (KNOWN_FIELDS.has(field) || value === null || value === undefined) continue;
    const harmless = HARMLESS_FIELDS[field];
    if (!harmless) throw unsupported(field, `Unknown parameter: '${field}'.`, 'unknown_parameter');
    if (!harmless(value))
      throw unsupported(field, `Unsupported value of '${field}': this service answers without it; leave it out.`);
  }
  // A background response is read back by its id: one that is not stored could never be.
  if (body.background === true && body.store === false)
    throw unsupported('store', 'Background responses must be stored: leave store out or true.', 'invalid_value');
}

/** A content part of a message item (or a call output) as a chat content part. */
function partOf(part: InputPart, at: Loc, role: string | undefined): ContentPart {
  switch (part.type) {
    case 'input_text':
    case 'output_text':
      if (typeof part.text !== 'string') throw validationError([missing([...at, 'text'])]);
      return { type: 'text', text: part.text };
    case 'refusal':
      if (typeof part.refusal !== 'string') throw validationError([missing([...at, 'refusal'])]);
      return { type: 'text', text: part.refusal };
    case 'input_image':
      if (role !== undefined && role !== 'user')
        throw unsupported(
          paramName([...at, 'type']),
          `Images go in user messages; a ${role} message takes text parts.`,
        );
      if (typeof part.image_url !== 'string')
        throw unsupported(
          paramName([...at, 'image_url']),
          'An input_image needs image_url (a data URL, or an https URL for a provider that fetches it); file_id is not supported.',
        );
      return { type: 'image_url', image_url: { url: part.image_url, ...(part.detail ? { detail: part.detail } : {}) } };
    default:
      throw unsupported(
        paramName([...at, 'type']),
        `Unsupported content part type '${part.type}': input_text, output_text, refusal and input_image are supported.`,
      );
  }
}

function contentOf(content: string | InputPart[], at: Loc, role: string | undefined): string | ContentPart[] {
  return typeof content === 'string' ? content : content.map((p, j) => partOf(p, [...at, j], role));
}

class MessageList {
  readonly messages: RequestMessage[] = [];
  readonly sources: MessageSource[] = [];

  push(m: RequestMessage, source: MessageSource): void {
    this.messages.push(m);
    this.sources.push(source);
  }

  /** A function_call item: a call of the assistant message just before it, or a message of its own. */
  call(item: InputItem, at: Loc): void {
    const issues = (['call_id', 'name', 'arguments'] as const)
      .filter((f) => item[f] === undefined)
      .map((f) => missing([...at, f]));
    if (issues.length > 0) throw validationError(issues);
    const call = {
      id: item.call_id!,
      type: 'function' as const,
      function: { name: item.name!, arguments: item.arguments! },
    };
    const last = this.messages.at(-1);
    if (last?.role === 'assistant') {
      (last.tool_calls ??= []).push(call);
      this.sources.at(-1)!.calls.push(at);
      return;
    }
    this.push({ role: 'assistant', content: null, tool_calls: [call] }, { at, contentField: undefined, calls: [at] });
  }
}

function messagesOf(req: CreateResponseRequest, prior: PriorItems): MessageList {
  const list = new MessageList();
  if (req.instructions != null)
    list.push(
      { role: 'system', content: req.instructions },
      { at: ['instructions'], contentField: undefined, calls: [] },
    );
  // A stored response's items were checked when they were made: anything refused among them now
  // is named at previous_response_id.
  addItems(list, prior, () => ['previous_response_id']);
  if (typeof req.input === 'string') {
    list.push({ role: 'user', content: req.input }, { at: ['input'], contentField: undefined, calls: [] });
    return list;
  }
  addItems(list, req.input, (i) => ['input', i]);
  return list;
}

function addItems(list: MessageList, items: InputItem[], locOf: (i: number) => Loc): void {
  items.forEach((item, i) => {
    const at: Loc = locOf(i);
    switch (item.type ?? 'message') {
      case 'message': {
        const issues = [];
        if (item.role === undefined) issues.push(missing([...at, 'role']));
        if (item.content === undefined) issues.push(missing([...at, 'content']));
        if (issues.length > 0) throw validationError(issues);
        const content = contentOf(item.content!, [...at, 'content'], item.role);
        return list.push({ role: item.role!, content }, { at, contentField: 'content', calls: [] });
      }
      case 'function_call':
        return list.call(item, at);
      case 'function_call_output': {
        const issues = (['call_id', 'output'] as const)
          .filter((f) => item[f] === undefined)
          .map((f) => missing([...at, f]));
        if (issues.length > 0) throw validationError(issues);
        const content = contentOf(item.output!, [...at, 'output'], undefined);
        return list.push(
          { role: 'tool', tool_call_id: item.call_id!, content },
          { at, contentField: 'output', calls: [] },
        );
      }
      case 'reasoning':
        // A chat model takes no reasoning items; the answer goes on from the messages around it.
        return;
      case 'item_reference':
        throw unsupported(
          paramName([...at, 'type']),
          'Item references need stored responses, which are not supported yet: send the item itself.',
        );
      default:
        throw unsupported(
          paramName([...at, 'type']),
          `Unsupported input item type '${item.type}': message, function_call, function_call_output and reasoning are supported.`,
        );
    }
  });
}

function toolsOf(req: CreateResponseRequest): RequestTool[] | undefined {
  if (req.tools == null) return undefined;
  return req.tools.map((t, i) => {
    if (t.type !== 'function')
      throw unsupported(
        paramName(['tools', i, 'type']),
        `Unsupported tool type '${t.type}': this service takes function tools only.`,
      );
    if (t.name === undefined) throw validationError([missing(['tools', i, 'name'])]);
    const fn: RequestTool['function'] = { name: t.name };
    if (t.description != null) fn.description = t.description;
    if (t.parameters != null) fn.parameters = t.parameters;
    if (t.strict != null) fn.strict = t.strict;
    return { type: 'function', function: fn };
  });
}

function toolChoiceOf(choice: CreateResponseRequest['tool_choice']): ToolChoice | undefined {
  if (choice == null) return undefined;
  if (typeof choice === 'string') return choice;
  if (choice.type !== 'function')
    throw unsupported(
      'tool_choice.type',
      `Unsupported tool_choice type '${choice.type}': none, auto, required or a function.`,
    );
  if (choice.name === undefined) throw validationError([missing(['tool_choice', 'name'])]);
  return { type: 'function', function: { name: choice.name } };
}

function responseFormatOf(format: TextFormat | undefined): ResponseFormat | undefined {
  if (format === undefined || format.type === 'text') return undefined;
  if (format.type === 'json_object') return { type: 'json_object' };
  const issues = (['name', 'schema'] as const)
    .filter((f) => format[f] === undefined)
    .map((f) => missing(['text', 'format', f]));
  if (issues.length > 0) throw validationError(issues);
  const json: Extract<ResponseFormat, { type: 'json_schema' }>['json_schema'] = {
    name: format.name!,
    schema: format.schema!,
  };
  if (format.description != null) json.description = format.description;
  if (format.strict != null) json.strict = format.strict;
  return { type: 'json_schema', json_schema: json };
}

/** The echoed text setting: the format as asked (OpenAI echoes a json_schema's fields flat). */
function textEcho(req: CreateResponseRequest): Record<string, unknown> {
  const format = req.text?.format;
  const echoed =
    format?.type === 'json_schema'
      ? {
          type: 'json_schema',
          name: format.name,
          schema: format.schema,
          ...(format.description != null ? { description: format.description } : {}),
          strict: format.strict ?? null,
        }
      : { type: format?.type ?? 'text' };
  return { format: echoed, verbosity: req.text?.verbosity ?? 'medium' };
}

/** The chat location a refusal names, as the Responses field it came from. */
function locMapper(sources: MessageSource[]): (loc: Loc) => Loc {
  return (loc) => {
    const [where, ...path] = loc;
    const [field, ...rest] = path;
    switch (field) {
      case 'messages': {
        const [index, part, ...tail] = rest;
        const source = typeof index === 'number' ? sources[index] : undefined;
        if (!source) return [where!, 'input'];
        if (part === 'tool_calls') {
          const call = typeof tail[0] === 'number' ? source.calls[tail[0]] : source.calls[0];
          const inner = tail.slice(1);
          const name = inner[0] === 'function' ? inner.slice(1) : inner[0] === 'id' ? ['call_id'] : inner;
          return [where!, ...(call ?? source.at), ...name];
        }
        if (part === 'tool_call_id') return [where!, ...source.at, 'call_id'];
        if (part === 'content' && source.contentField) {
          const inner = tail.at(-1) === 'url' ? tail.slice(0, -1) : tail;
          return [where!, ...source.at, source.contentField, ...inner];
        }
        return [where!, ...source.at];
      }
      case 'tools':
        return [where!, 'tools', ...rest.filter((p) => p !== 'function')];
      case 'tool_choice':
        return [where!, 'tool_choice', ...rest.filter((p) => p !== 'function')];
      case 'response_format':
        return [where!, 'text', 'format', ...rest.filter((p) => p !== 'json_schema')];
      case 'max_tokens':
      case 'max_completion_tokens':
        return [where!, 'max_output_tokens'];
      case 'reasoning_effort':
        return [where!, 'reasoning', 'effort'];
      default:
        return loc;
    }
  };
}

/**
 * The request as a chat completion request and the job's wire format, or a 400 naming a field the
 * service does not take (unknown, or a feature it lacks), or a 422 at a field the Responses API
 * requires.
 */
export function translateResponsesRequest(body: CreateResponseRequest, prior: PriorItems = []): TranslatedRequest {
  refuseUnknownFields(body as unknown as Record<string, unknown>);
  const { messages, sources } = messagesOf(body, prior);
  if (messages.length === 0)
    throw validationError([
      { loc: ['body', 'input'], msg: 'The input holds no message or function call', type: 'value_error' },
    ]);
  const chat: ChatCompletionRequest = { model: body.model, messages };
  const tools = toolsOf(body);
  if (tools !== undefined) chat.tools = tools;
  const toolChoice = toolChoiceOf(body.tool_choice);
  if (toolChoice !== undefined) chat.tool_choice = toolChoice;
  if (body.parallel_tool_calls != null) chat.parallel_tool_calls = body.parallel_tool_calls;
  const format = responseFormatOf(body.text?.format);
  if (format !== undefined) chat.response_format = format;
  if (body.max_output_tokens != null) chat.max_completion_tokens = body.max_output_tokens;
  if (body.temperature != null) chat.temperature = body.temperature;
  if (body.top_p != null) chat.top_p = body.top_p;
  if (body.user != null) chat.user = body.user;
  if (body.reasoning?.effort != null) chat.reasoning_effort = body.reasoning.effort;
  // Every Responses stream is resumable (GET /v1/responses/{id}?stream=true): a dropped
  // connection leaves the answer running for the resume grace period, as a chat stream asks for
  // with stream_options.resumable.
  // A background response streams into its relay log too, with nobody attached: its events are
  // there for GET ?stream=true, and its worker publishes them to the log alone.
  const background = body.background === true;
  if (body.stream === true || background) {
    chat.stream = true;
    chat.stream_options = { resumable: true };
  }

  const echo: Record<string, unknown> = {
    background,
    instructions: body.instructions ?? null,
    max_output_tokens: body.max_output_tokens ?? null,
    metadata: body.metadata ?? {},
    parallel_tool_calls: body.parallel_tool_calls ?? true,
    previous_response_id: body.previous_response_id ?? null,
    reasoning: { effort: body.reasoning?.effort ?? null, summary: body.reasoning?.summary ?? null },
    store: body.store ?? true,
    temperature: body.temperature ?? 1,
    text: textEcho(body),
    tool_choice: body.tool_choice ?? 'auto',
    top_p: body.top_p ?? 1,
    truncation: 'disabled',
    // OpenAI's Response has `user` only as a string: left out when not set.
    ...(body.user != null ? { user: body.user } : {}),
  };
  const store = body.store ?? true;
  const wire: ResponsesWire = {
    format: 'responses',
    echo,
    store,
    ...(store ? { input: storedItemsOf(body.input) } : {}),
    ...(background ? { background: true } : {}),
  };
  return { chat, wire, locOf: locMapper(sources) };
}

/** Item id prefixes, as OpenAI's: a message, a function call, a call's output, a reasoning item. */
const ITEM_PREFIX: Record<string, string> = {
  message: 'msg',
  function_call: 'fc',
  function_call_output: 'fco',
  reasoning: 'rs',
};

/**
 * The request's input as the items GET /v1/responses/{id}/input_items lists, and a follow-up with
 * previous_response_id continues from: each with an id (its own, or a new one) and a status, a
 * string content as one text part (output_text in an assistant's message, input_text otherwise).
 */
export function storedItemsOf(input: CreateResponseRequest['input']): Record<string, unknown>[] {
  const items: InputItem[] = typeof input === 'string' ? [{ type: 'message', role: 'user', content: input }] : input;
  return items.map((item) => {
    const type = item.type ?? 'message';
    const stored: Record<string, unknown> = {
      ...item,
      type,
      id: item.id ?? `${ITEM_PREFIX[type] ?? 'item'}_${randomIdPart(24)}`,
    };
    if (type === 'message' && typeof item.content === 'string')
      stored.content = [
        item.role === 'assistant'
          ? { type: 'output_text', text: item.content, annotations: [], logprobs: [] }
          : { type: 'input_text', text: item.content },
      ];
    if (type !== 'reasoning') stored.status = item.status ?? 'completed';
    return stored;
  });
}

/** A refusal of the chat rules (a 422), named at the Responses fields it is about. */
export function inResponsesTerms(err: unknown, locOf: (loc: Loc) => Loc): unknown {
  if (!(err instanceof AppError) || err.kind !== 'validation' || !err.detail) return err;
  return validationError(err.detail.map((issue) => ({ ...issue, loc: locOf(issue.loc) })));
}
