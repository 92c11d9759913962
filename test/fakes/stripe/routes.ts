import type { Obj } from './objects.js';

export type Method = 'GET' | 'POST' | 'DELETE';

/** The `:name` segments of a route path as an object type, so a handler reads `params.id` checked. */
export type PathParams<P extends string> = P extends `${string}:${infer Name}/${infer Rest}`
  ? { [K in Name]: string } & PathParams<Rest>
  : P extends `${string}:${infer Name}`
    ? { [K in Name]: string }
    : Record<never, never>;

/** What a handler sees: `body` is the form body for POST and the query for GET and DELETE, as Stripe reads parameters. */
export interface RouteRequest<P extends string = string> {
  params: PathParams<P>;
  query: Obj;
  body: Obj;
}

/** Returns the object to answer with (the server copies and expands it); throws StripeApiError to refuse. */
export type Handler<P extends string = string> = (req: RouteRequest<P>) => Obj;

type StoredHandler = (req: { params: Record<string, string>; query: Obj; body: Obj }) => Obj;

interface Route {
  method: Method;
  pattern: RegExp;
  handler: StoredHandler;
}

/**
 * The fake's routing table, filled by each resource module: its endpoints, and the id prefix
 * under which its objects can replace their ids in an answer (`expand[]`).
 */
export class Routes {
  private readonly routes: Route[] = [];
  private readonly expandables: { prefix: string; objects: Map<string, Obj> }[] = [];

  add<P extends string>(method: Method, path: P, handler: Handler<P>): void {
    const pattern = new RegExp(`^${path.replace(/:([a-z_]+)/g, '(?<$1>[^/]+)')}$`);
    this.routes.push({ method, pattern, handler: handler as unknown as StoredHandler });
  }

  /** Ids starting with `prefix` name objects in `objects`; the longest matching prefix wins. */
  expandable(prefix: string, objects: Map<string, Obj>): void {
    this.expandables.push({ prefix, objects });
    this.expandables.sort((a, b) => b.prefix.length - a.prefix.length);
  }

  /** The handler for a request and its decoded path parameters; undefined when no route matches. */
  match(method: string, path: string): { handler: StoredHandler; params: Record<string, string> } | undefined {
    for (const route of this.routes) {
      if (route.method !== method) continue;
      const m = route.pattern.exec(path);
      if (!m) continue;
      const params = Object.fromEntries(Object.entries(m.groups ?? {}).map(([k, v]) => [k, decodeURIComponent(v)]));
      return { handler: route.handler, params };
    }
    return undefined;
  }

  /** The stored object an id names, for expand[]. */
  lookup(id: string): Obj | undefined {
    return this.expandables.find((e) => id.startsWith(e.prefix))?.objects.get(id);
  }
}
