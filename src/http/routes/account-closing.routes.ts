import { closeAccount } from '../../account-closing/account-closing.service.js';
import {
  CloseAccountRequest,
  CloseAccountResponse,
  type CloseAccountInput,
} from '../../account-closing/account-closing.schema.js';
import { accountOf, defineRoutes, type RouteSpec } from '../route.js';

/** Closing an account (docs/api.md#closing-an-account, docs/accounts.md#closing-an-account). */
export function accountClosingRoutes(): RouteSpec[] {
  return defineRoutes([
    {
      method: 'post',
      path: '/v1/account/close',
      operationId: 'closeAccount',
      summary: 'Close the account: keys revoked, subscription cancelled, usage invoiced, personal data erased',
      description:
        "Needs the account's email address typed as confirmation (`confirm_email`, any letter case; 422 at `['body', 'confirm_email']` otherwise, and nothing changes). Takes a JWT only: an API key cannot close its account. The keys stop working on every server at once; then a paid subscription is cancelled in Stripe, the usage not yet invoiced is invoiced, and the console sessions, every JWT, stored responses and pending mail end with the personal data (docs/accounts.md says what invoices keep). When Stripe fails the answer is its error (502/503): the keys no longer work but the account is not closed, and repeating the request finishes it. Afterwards the account's JWTs get 401 `account_closed`, and the address can sign up again.",
      tag: 'accounts',
      auth: 'jwt',
      body: CloseAccountRequest,
      bodyRequired: true,
      bodyLimitBytes: 4 * 1024,
      responses: {
        200: { description: 'The account is closed', schema: CloseAccountResponse },
        401: {
          description:
            'An API key (`invalid_token`: this endpoint takes a JWT only), or the account is already closed (`account_closed`)',
        },
        502: { description: 'Stripe failed: the account is not closed yet (its keys are revoked); repeat the request' },
        503: {
          description:
            'Stripe or Redis did not answer: the account is not closed yet (its keys may be revoked); repeat the request',
        },
      },
      handler: async (ctx, app) => {
        ctx.set('Cache-Control', 'no-store');
        ctx.body = await closeAccount(app, accountOf(ctx).id, ctx.state.body as CloseAccountInput);
      },
    },
  ]);
}
