// What a compute thread runs (see compute-pool.ts): plain functions of structured-clonable inputs.
// Each first tells the pool it began, so a time budget counts the thread's time, not the wait for it.
import { parentPort } from 'node:worker_threads';
import { AppError } from '../errors.js';
import { AnswerTooLarge, planChoice, type PlannedChoice } from './local/local-answer.js';
import { promptPrefixes, type PromptPrefixes } from './local/prompt-prefixes.js';
import { compileSchema, schemaMismatch } from './json-schema.js';
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

export type PlanChoicesResult =
  | { choices: PlannedChoice[] }
  | { tooLarge: { index: number; chars: number } }
  /** The client's error (a schema the local model finds no answer for): an AppError's class does not cross threads. */
  | { refused: { message: string; code: string | null; param: string | null } };

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
      if (err instanceof AppError && err.status < 500)
        return { refused: { message: err.message, code: err.code, param: err.param } };
      throw err;
    }
  }
  return { choices };
}

export function promptTokens({ taskId, messages, extras }: PromptTokensTask): number {
  started(taskId);
  return countPromptTokens(messages, extras);
}

export function promptPrefixesTask({ taskId, messages, extras }: PromptTokensTask): PromptPrefixes {
  started(taskId);
  return promptPrefixes(messages, extras);
}

/** What checking a strict answer finds (see answerProblem). */
export type AnswerVerdict = string | undefined | { uncompilable: true };

/**
 * Why a strict json_schema answer is refused (see checked-output.ts), undefined when it matches, or
 * 'uncompilable' when the client's schema does not compile (admission checks it without compiling).
 */
export function answerProblem(schema: JsonSchemaObject, text: string): AnswerVerdict {
  let value: unknown;
  try {
    value = JSON.parse(text);
  } catch {
    return 'it is not JSON';
  }
  try {
    compileSchema(schema);
  } catch {
    return { uncompilable: true };
  }
  return schemaMismatch(schema, value);
}

export function answerProblemTask({ taskId, schema, text }: AnswerProblemTask): AnswerVerdict {
  started(taskId);
  return answerProblem(schema, text);
}
