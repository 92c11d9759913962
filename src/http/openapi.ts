import type { JsonSchema } from '../validation.js';
import { openApiPath, type RouteSpec } from './route.js';

const ValidationError: JsonSchema = {
  type: 'object',
  required: ['loc', 'msg', 'type'],
  properties: {
    loc: { type: 'array', items: { anyOf: [{ type: 'string' }, { type: 'integer' }] } },
    msg: { type: 'string' },
    type: { type: 'string' },
    ctx: {
      type: 'object',
      additionalProperties: { type: 'string' },
      description: "More about the failure, as FastAPI gives it: for `json_invalid`, the parser's reason in `error`",
    },
  },
};

const HTTPValidationError: JsonSchema = {
  type: 'object',
  required: ['detail', 'error'],
  properties: {
    detail: { type: 'array', items: { $ref: '#/components/schemas/ValidationError' } },
    error: {
      type: 'object',
      description:
        'The first failing field in the OpenAI error shape, for clients (the OpenAI SDKs) that read only `error`.',
      required: ['message', 'type', 'code', 'param'],
      properties: {
        message: {
          type: 'string',
          example: "Invalid 'messages[0].content': String should have at most 50000 characters",
        },
        type: { type: 'string', const: 'invalid_request_error' },
        code: { type: ['string', 'null'], description: "The first entry's `type`" },
        param: {
          type: ['string', 'null'],
          example: 'messages[0].content',
          description:
            'The failing field; null when it is not a field (the whole body, or malformed JSON, whose `loc` ends with a character position)',
        },
      },
    },
  },
};

const ErrorResponse: JsonSchema = {
  type: 'object',
  required: ['error'],
  properties: {
    error: {
      type: 'object',
      required: ['message', 'type'],
      properties: {
        message: { type: 'string' },
        type: { type: 'string', example: 'invalid_request_error' },
        code: { type: ['string', 'null'] },
        param: { type: ['string', 'null'] },
      },
    },
  },
};

const errorRef = (description: string) => ({
  description,
  content: { 'application/json': { schema: { $ref: '#/components/schemas/ErrorResponse' } } },
});

/** One OpenAPI parameter per property of a route's `params`, `query` or `headers` object schema. */
function parametersOf(schema: JsonSchema | undefined, location: 'path' | 'query' | 'header') {
  if (!schema) return [];
  const required = (schema.required ?? []) as string[];
  return Object.entries((schema.properties ?? {}) as Record<string, JsonSchema>).map(([name, property]) => ({
    name,
    in: location,
    required: required.includes(name),
    // Swagger UI shows a parameter's own description, not its schema's.
    ...(typeof property.description === 'string' ? { description: property.description } : {}),
    schema: property,
  }));
}

/** The OpenAPI 3.1 document, generated from the same route specs and schemas the router validates with. */
export function buildOpenApi(routes: RouteSpec[], serverUrl: string): JsonSchema {
  const paths: Record<string, Record<string, unknown>> = {};
  for (const r of routes) {
    if (r.hidden) continue;
    const responses: Record<string, unknown> = {};
    for (const [status, spec] of Object.entries(r.responses)) {
      const content: Record<string, unknown> = {};
      // An error status without a schema of its own answers with the one error envelope.
      const schema =
        spec.schema ?? (Number(status) >= 400 ? { $ref: '#/components/schemas/ErrorResponse' } : undefined);
      content['application/json'] = schema ? { schema } : {};
      for (const media of spec.alsoAs ?? []) content[media] = { schema: { type: 'string' } };
      responses[status] = {
        description: spec.description,
        content,
        ...(spec.headers
          ? {
              headers: Object.fromEntries(
                Object.entries(spec.headers).map(([h, d]) => [h, { description: d, schema: { type: 'string' } }]),
              ),
            }
          : {}),
      };
    }
    if (r.params || r.query || r.headers || r.body) {
      responses['422'] = {
        description: 'Validation error',
        content: { 'application/json': { schema: { $ref: '#/components/schemas/HTTPValidationError' } } },
      };
    }
    if (r.auth !== 'none') responses['401'] ??= errorRef('Missing or invalid credential');
    responses['429'] ??= errorRef('Rate limit exceeded; retry with exponential backoff');
    responses['500'] ??= errorRef('Server error');

    const parameters = [
      ...parametersOf(r.params, 'path'),
      ...parametersOf(r.query, 'query'),
      ...parametersOf(r.headers, 'header'),
    ];

    const security =
      r.auth === 'none'
        ? []
        : r.auth === 'api_key'
          ? [{ ApiKey: [] }]
          : r.auth === 'jwt'
            ? [{ JWT: [] }]
            : r.auth === 'session'
              ? [{ ConsoleSession: [] }]
              : [{ ApiKey: [] }, { JWT: [] }];

    (paths[openApiPath(r.path)] ??= {})[r.method] = {
      operationId: r.operationId,
      summary: r.summary,
      ...(r.description ? { description: r.description } : {}),
      tags: [r.tag],
      security,
      ...(parameters.length ? { parameters } : {}),
      ...(r.body
        ? {
            requestBody: {
              required: r.bodyRequired ?? true,
              content: {
                'application/json': { schema: r.body },
                ...(r.formBody ? { 'application/x-www-form-urlencoded': { schema: r.body } } : {}),
              },
            },
          }
        : {}),
      responses,
    };
  }
  return {
    openapi: '3.1.0',
    info: {
      title: 'Chat Completion, Account and Billing Service',
      version: '1.0.0',
      description:
        'OpenAI-compatible chat completions with self-serve accounts, a free tier and a pay-as-you-go paid tier billed monthly.',
    },
    servers: [{ url: serverUrl }],
    paths,
    components: {
      schemas: { ValidationError, HTTPValidationError, ErrorResponse },
      securitySchemes: {
        ApiKey: { type: 'http', scheme: 'bearer', description: 'API key: sk-svc-…' },
        JWT: { type: 'http', scheme: 'bearer', bearerFormat: 'JWT', description: 'Frontend-issued JSON Web Token' },
        ConsoleSession: {
          type: 'apiKey',
          in: 'cookie',
          name: 'svc_session',
          description:
            'The console session cookie (`__Host-svc_session` behind https), set by signing in; state-changing requests also need X-CSRF-Token and a same-origin Origin (docs/console.md)',
        },
      },
    },
  };
}
