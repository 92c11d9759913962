// reasoning_effort as a Gemini 2.5 model's thinking budget (generationConfig.thinkingConfig).
import type { ReasoningEffort } from '../types.js';

/**
 * Thinking tokens per effort: Google's own mapping of OpenAI's low, medium and high (its OpenAI
 * compatibility layer), 0 for none (thinking off), and the smallest budget Flash-Lite takes for
 * minimal. 24576 is the most Flash and Flash-Lite take.
 */
export const THINKING_BUDGETS: Record<ReasoningEffort, number> = {
  none: 0,
  minimal: 512,
  low: 1024,
  medium: 8192,
  high: 24576,
  xhigh: 24576,
  max: 24576,
};

/** 2.5 Pro always thinks: its budget runs from 128 to 32768. */
const PRO = /(^|\/)gemini-2\.5-pro/;
const PRO_BUDGETS: Partial<Record<ReasoningEffort, number>> = { none: 128, xhigh: 32768, max: 32768 };

/** The thinkingConfig for an effort on a model (its upstream name), or none without one. */
export function thinkingConfigOf(
  model: string,
  effort: ReasoningEffort | undefined,
): { thinkingBudget: number } | undefined {
  if (effort === undefined) return undefined;
  const budget = (PRO.test(model) ? PRO_BUDGETS[effort] : undefined) ?? THINKING_BUDGETS[effort];
  return { thinkingBudget: budget };
}
