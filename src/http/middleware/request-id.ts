import { randomIdPart } from '../../ids.js';
import type { Middleware } from 'koa';
import type { AppState } from '../route.js';

const CLIENT_ID = /^[A-Za-z0-9._:-]{8,128}$/;

export function newRequestId(): string {
  return `req_${randomIdPart(12)}`;
}

/** Every response carries X-Request-Id; a well-formed id from the caller is kept for tracing. */
export function requestId(): Middleware<AppState> {
  return async (ctx, next) => {
    const given = ctx.get('x-request-id');
    const id = CLIENT_ID.test(given) ? given : newRequestId();
    ctx.state.requestId = id;
    ctx.set('X-Request-Id', id);
    await next();
  };
}
