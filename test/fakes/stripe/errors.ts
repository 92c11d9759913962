import type { Obj } from './objects.js';

/** An error a handler throws to answer with Stripe's error body and status (what the client maps to its error classes). */
export class StripeApiError extends Error {
  constructor(
    readonly status: number,
    readonly type: string,
    message: string,
    readonly code?: string,
    readonly param?: string,
    readonly extra: Obj = {},
  ) {
    super(message);
  }
  toBody(): Obj {
    return {
      error: {
        type: this.type,
        message: this.message,
        ...(this.code ? { code: this.code } : {}),
        ...(this.param ? { param: this.param } : {}),
        ...this.extra,
      },
    };
  }
}

export const missing = (what: string, id: string, param = 'id') =>
  new StripeApiError(404, 'invalid_request_error', `No such ${what}: '${id}'`, 'resource_missing', param);
export const invalid = (message: string, param?: string, code?: string) =>
  new StripeApiError(400, 'invalid_request_error', message, code, param);
export const required = (param: string) =>
  new StripeApiError(400, 'invalid_request_error', `Missing required param: ${param}.`, 'parameter_missing', param);
