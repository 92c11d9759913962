import type { Context, Middleware } from 'koa';
import { clientNetworkKey } from '../../accounts/signup-limits.js';
import type { AppContext } from '../../context.js';
import { AppError } from '../../errors.js';
import type { BudgetSubject } from '../../limits/abuse-budget.service.js';
import type { AppState } from '../route.js';

/**
 * A route's credential check, then its abuse budget, both before any body is read: the account's
 * budget once the credential is good; the client network's for a refused credential (429 instead
 * of 401 once it is spent) and for a route without a credential that reads a body. A route
 * without a credential or a body (a page, /health, /metrics) is not counted.
 */
export function authenticateWithinBudget(
  app: Pick<AppContext, 'abuseBudget'>,
  auth: Middleware<AppState>,
  readsBody: boolean,
): Middleware<AppState> {
  return async (ctx, next) => {
    let authenticated = false;
    try {
      await auth(ctx, async () => {
        authenticated = true;
        const subject = subjectOf(ctx, readsBody);
        if (subject) {
          const announcedBytes = readsBody ? Number(ctx.get('content-length')) || 0 : 0;
          await app.abuseBudget.admit(subject, announcedBytes);
          ctx.state.budget = { subject, announcedBytes };
        }
        await next();
      });
    } catch (err) {
      if (!authenticated && err instanceof AppError && (err.status === 401 || err.status === 403))
        await app.abuseBudget.admit(clientOf(ctx), 0);
      throw err;
    }
  };
}

function subjectOf(ctx: Context & { state: AppState }, readsBody: boolean): BudgetSubject | undefined {
  const account = ctx.state.account;
  if (account) return { budget: account.tier, accountId: account.id };
  return readsBody ? clientOf(ctx) : undefined;
}

const clientOf = (ctx: Pick<Context, 'ip'>): BudgetSubject => ({ budget: 'client', network: clientNetworkKey(ctx.ip) });
