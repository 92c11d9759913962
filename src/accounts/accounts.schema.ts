import type { JsonSchema } from '../validation.js';

// The interface's SignupRequest: every field required, name and organization at most 100
// characters, email in email format. The same object validates requests and feeds OpenAPI.
// Name and organization go into Postgres and into emails: one line each, not blank (x-text).
export const SignupRequest: JsonSchema = {
  type: 'object',
  required: ['name', 'email', 'organization'],
  properties: {
    name: {
      type: 'string',
      maxLength: 100,
      'x-text': 'name',
      description: 'One line, not blank',
      example: 'Ada Lovelace',
    },
    email: { type: 'string', format: 'email', maxLength: 254, 'x-text': 'line', example: 'ada@example.com' },
    organization: {
      type: 'string',
      maxLength: 100,
      'x-text': 'name',
      description: 'One line, not blank',
      example: 'Analytical Engines Ltd',
    },
  },
};

export interface SignupInput {
  name: string;
  email: string;
  organization: string;
}

export const SignupResponse: JsonSchema = {
  type: 'object',
  required: ['message', 'email'],
  properties: {
    message: { type: 'string' },
    email: { type: 'string', description: 'The address submitted' },
  },
};

export const VerifyQuery: JsonSchema = {
  type: 'object',
  required: ['token'],
  properties: {
    token: {
      type: 'string',
      minLength: 1,
      maxLength: 512,
      'x-text': 'line',
      description: 'The token from the verification email link',
    },
  },
};

const apiKey: JsonSchema = {
  type: 'string',
  pattern: '^sk-svc-',
  description: 'The API key, shown once: save it now. Use it as `Authorization: Bearer <API_KEY>`.',
  example: 'sk-svc-…',
};

export const VerifyResponse: JsonSchema = {
  type: 'object',
  required: ['message', 'email', 'api_key'],
  properties: { message: { type: 'string' }, email: { type: 'string' }, api_key: apiKey },
};

export const RegenerateResponse: JsonSchema = {
  type: 'object',
  required: ['message', 'email', 'api_key'],
  properties: { message: { type: 'string' }, email: { type: 'string' }, api_key: apiKey },
};

export interface IssuedKeyResult {
  message: string;
  email: string;
  api_key: string;
}
