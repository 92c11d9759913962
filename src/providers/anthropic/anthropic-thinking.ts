// reasoning_effort as Claude's extended thinking: a thinking budget per effort, fitted under
// max_tokens, which counts thinking and answer together (as OpenAI's max_completion_tokens does).
import type Anthropic from '@anthropic-ai/sdk';
import type { CompletionParams, ReasoningEffort } from '../types.js';

/** The smallest budget_tokens the Messages API takes. */
export const MIN_THINKING_BUDGET = 1024;

/** Thinking tokens per effort ("none" is thinking disabled). */
export const THINKING_BUDGETS: Record<Exclude<ReasoningEffort, 'none'>, number> = {
  minimal: 1024,
  low: 2048,
  medium: 8192,
  high: 16384,
  xhigh: 24576,
  max: 32768,
};

/**
 * Where Claude cannot think on this request. A forced tool call (tool_choice required or a named
 * function, and every structured answer, which is a forced tool: anthropic.provider.ts) takes
 * only tool_choice auto or none with thinking. And a turn that goes on from the model's own last
 * message (tool results after its calls, or a prefill) must carry that message's signed thinking
 * block, which an OpenAI-shaped request has nowhere to hold.
 */
function cannotThink(p: CompletionParams): boolean {
  if (p.tool_choice === 'required' || typeof p.tool_choice === 'object' || p.response_format) return true;
  return p.messages.findLast((m) => m.role !== 'tool')?.role === 'assistant';
}

type Settings = { max_tokens: number; thinking?: Anthropic.ThinkingConfigParam };

/**
 * max_tokens and thinking for the request. Without max_tokens, the default is the answer's room
 * and the budget comes on top of it; with it, the budget fits under it (budget_tokens must be
 * less than max_tokens), and thinking is disabled when less than the minimum budget fits.
 */
export function thinkingOf(p: CompletionParams, defaultMaxTokens: number): Settings {
  const effort = p.reasoning_effort;
  const maxTokens = p.max_tokens ?? defaultMaxTokens;
  if (effort === undefined) return { max_tokens: maxTokens };
  if (effort === 'none' || cannotThink(p)) return { max_tokens: maxTokens, thinking: { type: 'disabled' } };
  const budget = THINKING_BUDGETS[effort];
  if (p.max_tokens === undefined)
    return { max_tokens: defaultMaxTokens + budget, thinking: { type: 'enabled', budget_tokens: budget } };
  const fitted = Math.min(budget, p.max_tokens - 1);
  if (fitted < MIN_THINKING_BUDGET) return { max_tokens: maxTokens, thinking: { type: 'disabled' } };
  return { max_tokens: maxTokens, thinking: { type: 'enabled', budget_tokens: fitted } };
}
