import type { JsonSchema } from '../validation.js';

// The console's session endpoints (docs/api.md#console-sessions): requests and answers.

export const SignInRequest: JsonSchema = {
  type: 'object',
  required: ['email'],
  additionalProperties: false,
  properties: {
    email: { type: 'string', format: 'email', maxLength: 254, 'x-text': 'line', example: 'ada@example.com' },
    return_to: {
      type: 'string',
      minLength: 1,
      maxLength: 512,
      'x-text': 'line',
      description:
        'Where the browser goes once signed in: a path on this service starting with one "/" (default /console/); anything else is refused.',
      example: '/console/usage',
    },
  },
};

export const SignInResponse: JsonSchema = {
  type: 'object',
  required: ['status'],
  properties: {
    status: { type: 'string', enum: ['sent'], description: 'The same whether or not the address has an account' },
  },
};

export const TokenForm: JsonSchema = {
  type: 'object',
  required: ['token'],
  properties: {
    token: {
      type: 'string',
      minLength: 1,
      maxLength: 512,
      'x-text': 'line',
      description: 'The token from the emailed link',
    },
  },
};

export const ConsoleSessionResponse: JsonSchema = {
  type: 'object',
  required: ['signed_in', 'jwt_available'],
  properties: {
    signed_in: { type: 'boolean' },
    account: {
      type: 'object',
      required: ['id', 'email', 'name', 'organization', 'tier'],
      properties: {
        id: { type: 'string', format: 'uuid' },
        email: { type: 'string' },
        name: { type: 'string' },
        organization: { type: 'string' },
        tier: { type: 'string', enum: ['free', 'paid'] },
      },
      description: 'Signed in only',
    },
    csrf_token: { type: 'string', description: 'Signed in only: send it as X-CSRF-Token on every console POST' },
    jwt_available: {
      type: 'boolean',
      description:
        'False when the service verifies JWTs from an external identity provider (JWT_JWKS_URL only): the console cannot issue them and stays off',
    },
    billing_configured: {
      type: 'boolean',
      description:
        'Signed in only: false when the service has no Stripe key (STRIPE_SECRET_KEY), so upgrades, card changes and invoices are off',
    },
  },
};

export const ConsoleTokenResponse: JsonSchema = {
  type: 'object',
  required: ['token', 'expires_at', 'expires_in'],
  properties: {
    token: { type: 'string', description: 'A JWT for the signed-in account, accepted by every /v1 JWT endpoint' },
    expires_at: { type: 'string', format: 'date-time' },
    expires_in: { type: 'integer', description: 'Seconds the token lives (CONSOLE_JWT_TTL_SECONDS)' },
  },
};

export const NewKeyResponse: JsonSchema = {
  type: 'object',
  required: ['api_key'],
  properties: {
    api_key: { type: 'string', pattern: '^sk-svc-', description: 'Shown once, right after verification' },
    model: {
      type: 'string',
      description: 'A model this account may use, for the "use it" example',
    },
  },
};
