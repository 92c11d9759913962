import { validate } from '../../validation.js';
import { admitCompletion, type AdmissionDeps, type AdmissionResult, type UnconfirmedKey } from './admission.js';
import type { Account } from '../../accounts/account.js';
import type { ApiKeyGrant } from '../../accounts/key-grant.js';
import { ChatCompletionRequestSchema, type ChatCompletionRequest } from './chat.schema.js';
import { inResponsesTerms, translateResponsesRequest, type PriorItems } from './responses-request.js';
import type { CreateResponseRequest } from './responses.schema.js';

/**
 * A Responses API request admitted as the completion job it translates to: the same checks, limits
 * and queue as a chat completion, the job framed as a Response. A refusal of the chat rules names
 * the Responses field it is about.
 */
export async function admitResponse(
  deps: AdmissionDeps,
  input: {
    account: Account;
    key?: ApiKeyGrant;
    request: CreateResponseRequest;
    unconfirmed?: UnconfirmedKey;
    prior?: PriorItems;
  },
): Promise<AdmissionResult> {
  const { chat, wire, locOf } = translateResponsesRequest(input.request, input.prior);
  try {
    // The chat request's bounds (messages, tool calls) hold for the translation as for a chat client.
    validate<ChatCompletionRequest>(ChatCompletionRequestSchema, chat, 'body');
    return await admitCompletion(deps, {
      account: input.account,
      key: input.key,
      request: chat,
      unconfirmed: input.unconfirmed,
      wire,
    });
  } catch (err) {
    throw inResponsesTerms(err, locOf);
  }
}
