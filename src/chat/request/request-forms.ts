// A validated ChatCompletionRequest turned into the CompletionParams every adapter reads, after the
// checks JSON Schema cannot make: rules across fields (a tool message answers an earlier call, the
// 50,000 characters of a message summed over its parts and tool calls, max_tokens against
// max_completion_tokens), what the catalog says of the model (images), and whether the schemas a
// client sent are JSON Schemas. Each refusal is a 422 at the field it is about.
import type { CatalogModel } from '../../catalog/catalog.js';
import { validationError, type ValidationIssue } from '../../errors.js';
import { jsonSchemaProblems } from '../../providers/json-schema.js';
import { IMAGE_TYPES, messageChars, parseDataUrl } from '../../providers/messages.js';
import type {
  CacheControl,
  ChatMessage,
  CompletionParams,
  ContentPart,
  ToolDefinition,
} from '../../providers/types.js';
import {
  MAX_CONTENT_CHARS,
  type ChatCompletionRequest,
  type ContentPart as RequestContentPart,
  type RequestCacheControl,
  type RequestMessage,
} from './chat.schema.js';

type Loc = (string | number)[];
const issue = (loc: Loc, msg: string, type = 'value_error'): ValidationIssue => ({ loc: ['body', ...loc], msg, type });

/** The characters rule, the content's presence and form per role, and the calls tool messages answer. */
function messageIssues(
  messages: RequestMessage[],
  model: Pick<CatalogModel, 'id' | 'input_modalities'>,
): ValidationIssue[] {
  const issues: ValidationIssue[] = [];
  const calls = new Set<string>();
  const takesImages = model.input_modalities?.includes('image') === true;
  messages.forEach((m, i) => {
    const at = (...loc: Loc) => ['messages', i, ...loc];
    const toolCalls = m.tool_calls ?? [];
    if (toolCalls.length > 0 && m.role !== 'assistant')
      issues.push(issue(at('tool_calls'), 'Only an assistant message carries tool_calls'));
    if (m.content === undefined || m.content === null) {
      if (!(m.role === 'assistant' && toolCalls.length > 0))
        issues.push(
          m.content === undefined
            ? issue(at('content'), 'Field required', 'missing')
            : issue(
                at('content'),
                'Input should be a valid string (null only in an assistant message with tool_calls)',
                'string_type',
              ),
        );
    }
    if (Array.isArray(m.content)) {
      m.content.forEach((part, j) => {
        if (part.type !== 'image_url') return;
        if (m.role !== 'user')
          issues.push(
            issue(at('content', j, 'type'), `Images go in user messages; a ${m.role} message takes text parts`),
          );
        else if (!takesImages)
          issues.push(issue(at('content', j), `The model \`${model.id}\` does not take images; send text parts only`));
        else issues.push(...imageUrlIssues(part.image_url.url, at('content', j, 'image_url', 'url')));
      });
    }
    const content = typeof m.content === 'string' || Array.isArray(m.content) ? m.content : null;
    const chars = messageChars({ content, tool_calls: toolCalls });
    if (chars > MAX_CONTENT_CHARS) {
      const contentAlone = messageChars({ content, tool_calls: [] }) > MAX_CONTENT_CHARS;
      issues.push(
        issue(
          at(contentAlone ? 'content' : 'tool_calls'),
          `A message should have at most ${MAX_CONTENT_CHARS} characters in all (text, image URLs and tool calls); it has ${chars}`,
          'string_too_long',
        ),
      );
    }
    if (m.role === 'tool') {
      if (m.tool_call_id === undefined || m.tool_call_id === null)
        issues.push(issue(at('tool_call_id'), 'Field required', 'missing'));
      else if (!calls.has(m.tool_call_id))
        issues.push(
          issue(at('tool_call_id'), `No earlier assistant message made a tool call with id '${m.tool_call_id}'`),
        );
    }
    for (const call of toolCalls) calls.add(call.id);
  });
  return issues;
}

/** The service never fetches a client's URL: a data URL of an image, or https for a provider that fetches it. */
function imageUrlIssues(url: string, loc: Loc): ValidationIssue[] {
  if (url.startsWith('https://')) return [];
  const data = parseDataUrl(url);
  if (!data)
    return [
      issue(loc, 'An image is a data URL (data:image/png;base64,…) or an https URL for a provider that fetches it'),
    ];
  if (!(IMAGE_TYPES as readonly string[]).includes(data.mediaType))
    return [issue(loc, `Images are ${IMAGE_TYPES.join(', ')}; got ${data.mediaType}`)];
  return [];
}

/** A client's JSON Schema against the service's rules, each problem at its place inside the field. */
const schemaIssues = (schema: Record<string, unknown>, field: Loc): ValidationIssue[] =>
  jsonSchemaProblems(schema).map((p) => issue([...field, ...p.at], p.msg));

function toolIssues(req: ChatCompletionRequest): ValidationIssue[] {
  const issues: ValidationIssue[] = [];
  const tools = req.tools ?? [];
  const names = new Set<string>();
  tools.forEach((t, i) => {
    if (names.has(t.function.name))
      issues.push(issue(['tools', i, 'function', 'name'], `Another tool is named '${t.function.name}' already`));
    names.add(t.function.name);
    const parameters = t.function.parameters;
    if (parameters !== undefined && parameters !== null)
      issues.push(...schemaIssues(parameters, ['tools', i, 'function', 'parameters']));
  });
  const choice = req.tool_choice;
  if (typeof choice === 'object' && choice !== null) {
    if (!names.has(choice.function.name))
      issues.push(issue(['tool_choice', 'function', 'name'], `No tool is named '${choice.function.name}'`));
  } else if (choice === 'required' && tools.length === 0) {
    issues.push(issue(['tool_choice'], 'tool_choice "required" needs tools'));
  }
  const format = req.response_format;
  if (format?.type === 'json_schema' && format.json_schema.schema != null)
    issues.push(...schemaIssues(format.json_schema.schema, ['response_format', 'json_schema', 'schema']));
  return issues;
}

const defined = <T extends object>(o: T): T =>
  Object.fromEntries(Object.entries(o).filter(([, v]) => v !== undefined && v !== null)) as T;

/** A breakpoint as adapters read it: ttl only when given (Anthropic's default is 5m), null as unset. */
function cacheControlOf(c: RequestCacheControl | null | undefined): { cache_control?: CacheControl } {
  if (c == null) return {};
  return { cache_control: c.ttl == null ? { type: 'ephemeral' } : { type: 'ephemeral', ttl: c.ttl } };
}

function partOf(part: RequestContentPart): ContentPart {
  const { cache_control, ...rest } = part;
  return { ...rest, ...cacheControlOf(cache_control) };
}

function messageOf(m: RequestMessage): ChatMessage {
  const content = Array.isArray(m.content) ? m.content.map(partOf) : (m.content ?? null);
  const out: ChatMessage = { role: m.role, content, ...cacheControlOf(m.cache_control) };
  if (m.name != null) out.name = m.name;
  if (m.tool_calls != null && m.tool_calls.length > 0) out.tool_calls = m.tool_calls;
  if (m.tool_call_id != null) out.tool_call_id = m.tool_call_id;
  return out;
}

function toolOf(t: NonNullable<ChatCompletionRequest['tools']>[number]): ToolDefinition {
  return {
    type: 'function',
    function: defined({ ...t.function }) as ToolDefinition['function'],
    ...cacheControlOf(t.cache_control),
  };
}

/**
 * The adapter's view of the request (the provider's model name, the client's messages), or a 422
 * naming every field the checks above refuse. null means "not set", as in OpenAI's API.
 */
export function completionParamsOf(
  req: ChatCompletionRequest,
  model: Pick<CatalogModel, 'id' | 'upstream_model' | 'input_modalities' | 'reasoning'>,
): CompletionParams {
  const issues = [...messageIssues(req.messages, model), ...toolIssues(req)];
  if (req.max_tokens != null && req.max_completion_tokens != null && req.max_tokens !== req.max_completion_tokens)
    issues.push(
      issue(
        ['max_completion_tokens'],
        `max_completion_tokens is max_tokens' other name: send one, or both equal (max_tokens is ${req.max_tokens})`,
      ),
    );
  if (issues.length > 0) throw validationError(issues);

  const params: CompletionParams = { model: model.upstream_model, messages: req.messages.map(messageOf) };
  if (req.temperature != null) params.temperature = req.temperature;
  if (req.top_p != null) params.top_p = req.top_p;
  const maxTokens = req.max_tokens ?? req.max_completion_tokens;
  if (maxTokens != null) params.max_tokens = maxTokens;
  if (req.n != null) params.n = req.n;
  const stop = typeof req.stop === 'string' ? [req.stop] : req.stop;
  if (stop != null && stop.length > 0) params.stop = stop;
  if (req.presence_penalty != null) params.presence_penalty = req.presence_penalty;
  if (req.frequency_penalty != null) params.frequency_penalty = req.frequency_penalty;
  if (req.logit_bias != null) params.logit_bias = req.logit_bias;
  if (req.user != null) params.user = req.user;
  if (req.seed != null) params.seed = req.seed;
  // tool_choice and parallel_tool_calls mean nothing without tools ("none" and "auto" are accepted then).
  if (req.tools != null && req.tools.length > 0) {
    params.tools = req.tools.map(toolOf);
    if (req.tool_choice != null) params.tool_choice = req.tool_choice;
    if (req.parallel_tool_calls != null) params.parallel_tool_calls = req.parallel_tool_calls;
  }
  // A model without thinking settings answers as it always does: the effort is a hint, not a
  // demand (OpenAI refuses it on such a model; a client that switches models should not break).
  if (req.reasoning_effort != null && model.reasoning === true) params.reasoning_effort = req.reasoning_effort;
  const format = req.response_format;
  if (format?.type === 'json_object') params.response_format = { type: 'json_object' };
  if (format?.type === 'json_schema')
    params.response_format = { type: 'json_schema', json_schema: defined({ ...format.json_schema }) as never };
  return params;
}
