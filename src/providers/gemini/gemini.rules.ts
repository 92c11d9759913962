import { checkRoles, unsupported } from '../upstream.js';
import type { CompletionParams } from '../types.js';

const PROVIDER = 'Gemini';
const ROLES = ['system', 'developer', 'user', 'assistant'] as const;

/**
 * What Gemini models accept. A request the API would refuse is refused here instead (422
 * naming the field), before anything is queued; the local model applies the same rules offline.
 */
export function checkGeminiRequest(p: CompletionParams): void {
  checkRoles(p.messages, ROLES, PROVIDER);
  if (!p.messages.some((m) => m.role === 'user' || m.role === 'assistant')) {
    throw unsupported('messages', 'Gemini models need at least one user or assistant message besides system messages', [
      'messages',
    ]);
  }
  if (p.logit_bias !== undefined && Object.keys(p.logit_bias).length > 0)
    throw unsupported('logit_bias', 'logit_bias is not supported by Gemini models');
}
