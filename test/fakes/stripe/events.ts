import Stripe from 'stripe';
import { request, type HttpResult } from '../../support/http.js';
import { clone, randomId, type Obj } from './objects.js';

/** An event of the given type for an object, as Stripe would send it. */
export function stripeEvent(type: string, object: Obj, created: number, previousAttributes?: Obj): Obj {
  return {
    id: randomId('evt_'),
    object: 'event',
    api_version: Stripe.API_VERSION,
    created,
    data: { object: clone(object), ...(previousAttributes ? { previous_attributes: previousAttributes } : {}) },
    livemode: false,
    pending_webhooks: 1,
    request: { id: null, idempotency_key: null },
    type,
  };
}

/**
 * Posts an event to a webhook endpoint the way Stripe does: the JSON body signed with the
 * stripe package's own test helper (`t=<timestamp>,v1=<hmac>`).
 */
export async function deliverEvent(
  url: string,
  event: Obj,
  secret: string,
  opts: { timestamp?: number; signature?: string; payload?: string } = {},
): Promise<HttpResult> {
  const payload = opts.payload ?? JSON.stringify(event, null, 2);
  const header =
    opts.signature ??
    Stripe.webhooks.generateTestHeaderString({
      payload,
      secret,
      ...(opts.timestamp !== undefined ? { timestamp: opts.timestamp } : {}),
    });
  return request('POST', url, {
    raw: payload,
    headers: { 'content-type': 'application/json; charset=utf-8', 'stripe-signature': header },
  });
}
