import type { JsonSchema } from '../validation.js';
import { InvoiceSchema } from '../billing/billing.schema.js';

export const CloseAccountRequest: JsonSchema = {
  type: 'object',
  required: ['confirm_email'],
  additionalProperties: false,
  properties: {
    confirm_email: {
      type: 'string',
      minLength: 1,
      maxLength: 254,
      'x-text': 'line',
      description: "The account's email address, typed by the person as confirmation (any letter case)",
      example: 'ada@example.com',
    },
  },
};

export interface CloseAccountInput {
  confirm_email: string;
}

export const CloseAccountResponse: JsonSchema = {
  type: 'object',
  required: ['status', 'message', 'account_id', 'subscription_cancelled', 'final_invoice'],
  properties: {
    status: { type: 'string', enum: ['closed'] },
    message: { type: 'string' },
    account_id: { type: 'string', description: 'Kept on the invoices; nothing else identifies the person any more' },
    subscription_cancelled: { type: 'boolean', description: 'A paid subscription was cancelled in Stripe' },
    final_invoice: {
      oneOf: [InvoiceSchema, { type: 'null' }],
      description: 'The invoice of the usage not yet invoiced, issued in Stripe; null when nothing was owed',
    },
  },
};
