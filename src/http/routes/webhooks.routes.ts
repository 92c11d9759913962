import { HANDLED_EVENTS, handleWebhook } from '../../subscriptions/webhooks.service.js';
import { WebhookResultSchema } from '../../subscriptions/subscriptions.schema.js';
import { defineRoutes, type RouteSpec } from '../route.js';

/** Endpoint 15: Stripe's events, verified against the raw bytes (rawBody) with the webhook secret. */
export function webhookRoutes(): RouteSpec[] {
  return defineRoutes([
    {
      method: 'post',
      path: '/v1/webhooks/processor',
      operationId: 'processorWebhook',
      summary: 'Stripe webhook: changes tiers on checkout, subscription and payment events',
      description: `Verifies the Stripe-Signature header against the exact request body. Acts on ${HANDLED_EVENTS.join(', ')}; acknowledges every other verified event with 200. A redelivered event is acknowledged without a second effect.`,
      tag: 'webhooks',
      auth: 'none',
      rawBody: true,
      // Stripe's event payloads are a few kilobytes; an invoice with many lines stays far below this.
      bodyLimitBytes: 1024 * 1024,
      responses: {
        200: {
          description: 'Event received (and applied, ignored or recognised as a duplicate)',
          schema: WebhookResultSchema,
        },
        400: { description: 'Missing or invalid signature; nothing was done' },
        502: { description: 'Stripe failed while the current state was read; Stripe will redeliver' },
        503: { description: 'Webhook secret not configured, or Stripe unreachable; Stripe will redeliver' },
      },
      handler: async (ctx, app) => {
        ctx.body = await handleWebhook(app, ctx.state.rawBody, ctx.get('stripe-signature') || undefined);
      },
    },
  ]);
}
