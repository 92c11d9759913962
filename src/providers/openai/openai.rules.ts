import { checkRoles, unsupported } from '../upstream.js';
import type { CompletionParams } from '../types.js';

const PROVIDER = 'OpenAI';
const ROLES = ['system', 'developer', 'user', 'assistant', 'tool'] as const;

/**
 * What OpenAI models accept. A request the API would refuse is refused here instead (422
 * naming the field), before anything is queued; the local model applies the same rules offline.
 */
export function checkOpenAIRequest(p: CompletionParams): void {
  checkRoles(p.messages, ROLES, PROVIDER);
  // OpenAI's own rule for logit_bias: token ids as keys, biases from -100 to 100.
  for (const [token, bias] of Object.entries(p.logit_bias ?? {})) {
    if (!/^\d+$/.test(token))
      throw unsupported('logit_bias', `logit_bias keys must be token ids (integers); got "${token}"`, [
        'logit_bias',
        token,
      ]);
    if (bias < -100 || bias > 100)
      throw unsupported('logit_bias', `logit_bias values must be from -100 to 100; got ${bias} for token ${token}`, [
        'logit_bias',
        token,
      ]);
  }
}
