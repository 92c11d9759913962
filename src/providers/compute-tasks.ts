// What a compute thread runs (see compute-pool.ts): plain functions of structured-clonable inputs.
// Each first tells the pool it began, so a time budget counts the thread's time, not the wait for it.
import { parentPort } from 'node:worker_threads';
import { AnswerTooLarge, planChoice, type PlannedChoice } from './local/local-answer.js';
import { schemaMismatch } from './json-schema.js';
import { countPromptTokens } from './tokenizer.js';
import type { ChatMessage, CompletionParams, JsonSchemaObject } from './types.js';

export interface TaskStarted {
  started: number;
}

export interface PlanChoicesTask {
  taskId: number;
  params: CompletionParams;
  maxAnswerChars: number;
}

export type PlanChoicesResult = { choices: PlannedChoice[] } | { tooLarge: { index: number; chars: number } };

export interface PromptTokensTask {
  taskId: number;
  messages: readonly ChatMessage[];
  extras: Pick<CompletionParams, 'tools' | 'response_format'>;
}

export interface AnswerProblemTask {
  taskId: number;
  schema: JsonSchemaObject;
  text: string;
}

const started = (taskId: number) => parentPort?.postMessage({ started: taskId } satisfies TaskStarted);

/** Every choice of the local model's answer (the request's seed makes them the same as on the event loop). */
export function planChoices({ taskId, params, maxAnswerChars }: PlanChoicesTask): PlanChoicesResult {
  started(taskId);
  const choices: PlannedChoice[] = [];
  for (let i = 0; i < (params.n ?? 1); i++) {
    try {
      choices.push(planChoice(params, i, maxAnswerChars));
    } catch (err) {
      if (err instanceof AnswerTooLarge) return { tooLarge: { index: i, chars: err.chars } };
      throw err;
    }
  }
  return { choices };
}

export function promptTokens({ taskId, messages, extras }: PromptTokensTask): number {
  started(taskId);
  return countPromptTokens(messages, extras);
}

/** Why a strict json_schema answer is refused (see checked-output.ts), or undefined when it matches. */
export function answerProblem(schema: JsonSchemaObject, text: string): string | undefined {
  let value: unknown;
  try {
    value = JSON.parse(text);
  } catch {
    return 'it is not JSON';
  }
  return schemaMismatch(schema, value);
}

export function answerProblemTask({ taskId, schema, text }: AnswerProblemTask): string | undefined {
  started(taskId);
  return answerProblem(schema, text);
}
