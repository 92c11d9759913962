import { checkRoles, checkToolCallArguments, unsupported } from '../upstream.js';
import { imagesOf, textOf } from '../messages.js';
import { cacheBreakpointsAt, type CacheBreakpoint } from '../cache-control.js';
import type { CompletionParams } from '../types.js';

const PROVIDER = 'Anthropic';
const ROLES = ['system', 'developer', 'user', 'assistant', 'tool'] as const;
/** The most cache_control breakpoints the Messages API takes in one request. */
export const MAX_CACHE_BREAKPOINTS = 4;

/**
 * What Anthropic models accept. A request the API would refuse is refused here instead (422
 * naming the field), before anything is queued; the local model applies the same rules offline.
 */
export function checkAnthropicRequest(p: CompletionParams): void {
  checkRoles(p.messages, ROLES, PROVIDER);
  if (!p.messages.some((m) => m.role === 'user' || m.role === 'assistant')) {
    throw unsupported(
      'messages',
      'Anthropic models need at least one user or assistant message besides system messages',
      ['messages'],
    );
  }
  // The Messages API refuses empty text blocks, except a final assistant turn (a prefill).
  p.messages.forEach((m, i) => {
    const empty = textOf(m.content) === '' && imagesOf(m.content).length === 0 && !m.tool_calls?.length;
    if (empty && !(m.role === 'assistant' && i === p.messages.length - 1)) {
      throw unsupported('messages', 'Anthropic models do not accept an empty message content', [
        'messages',
        i,
        'content',
      ]);
    }
  });
  const sampling =
    'is not supported by Anthropic models: the Messages API (version 2026-10-21) removed sampling parameters; leave it out or set it to 1';
  if (p.temperature !== undefined && p.temperature !== 1) throw unsupported('temperature', `temperature ${sampling}`);
  if (p.top_p !== undefined && p.top_p !== 1) throw unsupported('top_p', `top_p ${sampling}`);
  if (p.presence_penalty !== undefined && p.presence_penalty !== 0)
    throw unsupported(
      'presence_penalty',
      'presence_penalty is not supported by Anthropic models; leave it out or set it to 0',
    );
  if (p.frequency_penalty !== undefined && p.frequency_penalty !== 0)
    throw unsupported(
      'frequency_penalty',
      'frequency_penalty is not supported by Anthropic models; leave it out or set it to 0',
    );
  if (p.logit_bias !== undefined && Object.keys(p.logit_bias).length > 0)
    throw unsupported('logit_bias', 'logit_bias is not supported by Anthropic models');
  // The API refuses a stop sequence made only of whitespace.
  p.stop?.forEach((s, i) => {
    if (s.trim() === '')
      throw unsupported('stop', 'Anthropic models do not accept a stop sequence made only of whitespace', ['stop', i]);
  });
  checkToolCallArguments(p.messages, PROVIDER);
  // Structured output is a tool the model calls (anthropic.provider.ts): its name must be free.
  const format = p.response_format;
  const answerTool = format?.type === 'json_schema' ? format.json_schema.name : format ? 'json_object' : undefined;
  if (answerTool !== undefined && p.tools?.some((t) => t.function.name === answerTool))
    throw unsupported(
      'response_format',
      `Anthropic models answer in JSON by calling a tool named '${answerTool}'; a tool of yours has that name: rename one`,
      format?.type === 'json_schema' ? ['response_format', 'json_schema', 'name'] : ['response_format', 'type'],
    );
  checkCacheControl(p);
}

/**
 * The request's cache_control marks in the order Anthropic reads the prompt: tools, then the
 * system (and developer) messages, which become `system`, then the conversation.
 */
function breakpointsInPromptOrder(p: CompletionParams): CacheBreakpoint[] {
  const place = (b: CacheBreakpoint) => {
    if (b.at[0] === 'tools') return 0;
    const role = p.messages[b.at[1] as number]?.role;
    return role === 'system' || role === 'developer' ? 1 : 2;
  };
  return cacheBreakpointsAt(p).sort((a, b) => place(a) - place(b));
}

/** At most 4 breakpoints, and a 1-hour one never after a 5-minute one: the API refuses either. */
function checkCacheControl(p: CompletionParams): void {
  const marks = breakpointsInPromptOrder(p);
  const extra = marks[MAX_CACHE_BREAKPOINTS];
  if (extra)
    throw unsupported(
      String(extra.at[0]),
      `Anthropic models take at most ${MAX_CACHE_BREAKPOINTS} cache_control breakpoints in a request; it has ${marks.length}`,
      extra.at,
    );
  const firstShort = marks.findIndex((b) => b.mark.ttl !== '1h');
  const lateLong = marks.find((b, i) => firstShort !== -1 && i > firstShort && b.mark.ttl === '1h');
  if (lateLong)
    throw unsupported(
      String(lateLong.at[0]),
      'Anthropic models take 1-hour cache_control breakpoints before 5-minute ones (the prompt is read as tools, system messages, then the conversation)',
      lateLong.at,
    );
}
