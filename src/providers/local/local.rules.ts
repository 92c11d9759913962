import { checkRoles } from '../upstream.js';
import type { CompletionParams } from '../types.js';

/** The roles every adapter understands. */
const ROLES = ['system', 'developer', 'user', 'assistant', 'tool'] as const;

/**
 * What the local model refuses when it serves a model of its own: a role no adapter understands.
 * Every other field is honoured or has no effect. Standing in for another provider, it applies
 * that provider's rules instead.
 */
export function checkLocalRequest(p: CompletionParams): void {
  checkRoles(p.messages, ROLES, 'local');
}
