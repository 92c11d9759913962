// What answers a client's JSON Schema allows, found without generating one: whether any finite
// answer exists at all (a contradiction, `false` or `not: {}` where a value is required, a $ref
// that requires itself for ever) and how short the shortest one can be. Only what must be in
// every answer counts (required properties, minItems), so an optional contradiction is no error.
// The walk follows the schema's own nesting, whose depth the limits bound; $refs are looked up.
import { SCHEMA_LIMITS, formatCount, MAX_ANSWER_TOKENS, type SchemaIssue } from './json-schema-limits.js';
import { childrenOf, forEachSubschema, resolveLocalRef, type Loc, type SchemaNode } from './json-schema-walk.js';

interface Why extends SchemaIssue {
  /** Set when the reason is a $ref that requires itself (a better reason may be found deeper). */
  recursive?: boolean;
}
/** A lower bound of the shortest answer's JSON text, in characters; Infinity when there is none. */
interface Shortest {
  chars: number;
  why?: Why;
}

interface RefState {
  productive(ref: string): boolean;
  why(ref: string): Why | undefined;
}

const none = (at: Loc, msg: string): Shortest => ({ chars: Infinity, why: { at, msg } });
const ALL_TYPES = ['null', 'boolean', 'integer', 'number', 'string', 'array', 'object'];
const num = (v: unknown): number | undefined => (typeof v === 'number' && Number.isFinite(v) ? v : undefined);
const count = (v: unknown): number => (typeof v === 'number' && Number.isFinite(v) && v > 0 ? Math.floor(v) : 0);
const isRecord = (v: unknown): v is Record<string, unknown> => v !== null && typeof v === 'object' && !Array.isArray(v);

function jsonTypeOf(v: unknown): string {
  if (v === null) return 'null';
  if (Array.isArray(v)) return 'array';
  if (typeof v === 'number') return Number.isInteger(v) ? 'integer' : 'number';
  return typeof v;
}

/** The pointer of a local $ref as a location ("#/$defs/a" is ["$defs", "a"]). */
export function locOfRef(ref: string): Loc {
  if (ref === '#') return [];
  return ref
    .slice(2)
    .split('/')
    .map((raw) => {
      try {
        return decodeURIComponent(raw).replace(/~1/g, '/').replace(/~0/g, '~');
      } catch {
        return raw;
      }
    });
}

function numberRange(s: Record<string, unknown>, at: Loc, integer: boolean): Shortest {
  // Draft-04's boolean exclusiveMinimum/exclusiveMaximum, and the numeric forms of later drafts.
  let lower = num(s.minimum) ?? -Infinity;
  let lowerOpen = s.exclusiveMinimum === true;
  const xmin = num(s.exclusiveMinimum);
  if (xmin !== undefined && xmin >= lower) [lower, lowerOpen] = [xmin, true];
  let upper = num(s.maximum) ?? Infinity;
  let upperOpen = s.exclusiveMaximum === true;
  const xmax = num(s.exclusiveMaximum);
  if (xmax !== undefined && xmax <= upper) [upper, upperOpen] = [xmax, true];
  const empty = integer
    ? (lowerOpen ? Math.floor(lower) + 1 : Math.ceil(lower)) > (upperOpen ? Math.ceil(upper) - 1 : Math.floor(upper))
    : lower > upper || (lower === upper && (lowerOpen || upperOpen));
  if (!empty) return { chars: 1 };
  const what = integer ? 'integer' : 'number';
  return none(
    at,
    `No ${what} is ${lowerOpen ? 'greater than' : 'at least'} ${lower} and ${upperOpen ? 'less than' : 'at most'} ${upper}: the schema's bounds contradict each other`,
  );
}

function pairProblem(
  s: Record<string, unknown>,
  at: Loc,
  min: string,
  max: string,
  what: string,
): Shortest | undefined {
  const lo = num(s[min]);
  const hi = num(s[max]);
  if (lo !== undefined && hi !== undefined && lo > hi)
    return none(at, `${min} ${lo} is greater than ${max} ${hi}: no ${what} can satisfy both`);
  return undefined;
}

class Answers {
  constructor(private readonly refs: RefState) {}

  shortest(node: SchemaNode, at: Loc): Shortest {
    if (node === true) return { chars: 1 };
    if (node === false) return none(at, 'The schema `false` accepts no value, and a value is required here');
    const s = node;
    if (s.not === true || (isRecord(s.not) && Object.keys(s.not).length === 0))
      return none([...at, 'not'], '`not: {}` accepts no value, and a value is required here');
    let result: Shortest = this.byType(s, at);
    const need = (r: Shortest) => {
      if (r.chars > result.chars) result = r;
    };
    if (typeof s.$ref === 'string') need(this.ref(s.$ref, [...at, '$ref']));
    if (Array.isArray(s.allOf)) s.allOf.forEach((m, i) => need(this.shortest(m as SchemaNode, [...at, 'allOf', i])));
    for (const kw of ['anyOf', 'oneOf'] as const) {
      const list = s[kw];
      if (!Array.isArray(list) || list.length === 0) continue;
      let best: Shortest | undefined;
      list.forEach((m, i) => {
        const r = this.shortest(m as SchemaNode, [...at, kw, i]);
        if (best === undefined || r.chars < best.chars) best = r;
      });
      need(best!);
    }
    return result;
  }

  private ref(ref: string, at: Loc): Shortest {
    if (this.refs.productive(ref)) return { chars: 1 };
    const why = this.refs.why(ref);
    if (why && !why.recursive) return { chars: Infinity, why };
    return {
      chars: Infinity,
      why: {
        at,
        msg: `'${ref}' has no finite value: each value of it requires another value of it (through required properties or minItems), so no answer could ever end`,
        recursive: true,
      },
    };
  }

  private byType(s: Record<string, unknown>, at: Loc): Shortest {
    if (Array.isArray(s.type) && s.type.length === 0)
      return none([...at, 'type'], 'An empty type list accepts no value');
    const types = Array.isArray(s.type) ? (s.type as string[]) : typeof s.type === 'string' ? [s.type] : ALL_TYPES;
    const allows = (t: string) => types.includes(t) || (t === 'integer' && types.includes('number'));
    const values = 'const' in s ? [s.const] : Array.isArray(s.enum) ? s.enum : undefined;
    if (values) {
      if (values.length === 0) return none([...at, 'enum'], 'An empty enum accepts no value');
      const fitting = values.filter((v) => allows(jsonTypeOf(v)));
      if (fitting.length === 0)
        return none([...at, 'const' in s ? 'const' : 'enum'], `No value of the enum is of type ${types.join(' or ')}`);
      return { chars: Math.min(...fitting.map((v) => JSON.stringify(v).length)) };
    }
    let best: Shortest | undefined;
    for (const t of types) {
      const r = this.ofType(t, s, at);
      if (best === undefined || r.chars < best.chars) best = r;
    }
    return best ?? { chars: 1 };
  }

  private ofType(type: string, s: Record<string, unknown>, at: Loc): Shortest {
    switch (type) {
      case 'integer':
      case 'number':
        return numberRange(s, at, type === 'integer');
      case 'string':
        return pairProblem(s, at, 'minLength', 'maxLength', 'string') ?? { chars: 2 + count(s.minLength) };
      case 'array':
        return this.array(s, at);
      case 'object':
        return this.object(s, at);
      default:
        return { chars: 4 };
    }
  }

  private array(s: Record<string, unknown>, at: Loc): Shortest {
    const pair =
      pairProblem(s, at, 'minItems', 'maxItems', 'array') ?? pairProblem(s, at, 'minContains', 'maxContains', 'array');
    if (pair) return pair;
    const prefix = Array.isArray(s.prefixItems) ? s.prefixItems : Array.isArray(s.items) ? s.items : [];
    const rest = Array.isArray(s.items) ? s.additionalItems : s.items;
    const n = Math.min(count(s.minItems), SCHEMA_LIMITS.minItems);
    let chars = 2 + Math.max(0, n - 1);
    let restShortest: Shortest | undefined;
    for (let i = 0; i < n; i++) {
      let r: Shortest;
      if (i < prefix.length)
        r = this.shortest(prefix[i] as SchemaNode, [...at, Array.isArray(s.prefixItems) ? 'prefixItems' : 'items', i]);
      else
        r = restShortest ??=
          rest === undefined
            ? { chars: 1 }
            : this.shortest(rest as SchemaNode, [...at, Array.isArray(s.items) ? 'additionalItems' : 'items']);
      if (!Number.isFinite(r.chars)) return r;
      chars += r.chars;
    }
    if (s.contains !== undefined && s.minContains !== 0) {
      const r = this.shortest(s.contains as SchemaNode, [...at, 'contains']);
      if (!Number.isFinite(r.chars)) return r;
    }
    return { chars };
  }

  private object(s: Record<string, unknown>, at: Loc): Shortest {
    const pair = pairProblem(s, at, 'minProperties', 'maxProperties', 'object');
    if (pair) return pair;
    const required = [...new Set(Array.isArray(s.required) ? s.required.filter((r) => typeof r === 'string') : [])];
    const maxProperties = num(s.maxProperties);
    if (maxProperties !== undefined && required.length > maxProperties)
      return none(at, `${required.length} properties are required but maxProperties is ${maxProperties}`);
    const props = isRecord(s.properties) ? s.properties : {};
    const patterned = isRecord(s.patternProperties) && Object.keys(s.patternProperties).length > 0;
    let chars = 2;
    for (const name of required) {
      let r: Shortest;
      if (Object.hasOwn(props, name)) r = this.shortest(props[name] as SchemaNode, [...at, 'properties', name]);
      else if (patterned || s.additionalProperties === undefined) r = { chars: 1 };
      else if (s.additionalProperties === false)
        return none(
          [...at, 'required'],
          `'${name}' is required, but additionalProperties: false allows no property of that name`,
        );
      else r = this.shortest(s.additionalProperties as SchemaNode, [...at, 'additionalProperties']);
      if (!Number.isFinite(r.chars)) return r;
      chars += JSON.stringify(name).length + 2 + r.chars;
      if (chars > 2 * SCHEMA_LIMITS.answerChars) break;
    }
    // Each further entry: a distinct name, a colon, a value and a comma.
    chars += 5 * Math.max(0, count(s.minProperties) - required.length);
    return { chars };
  }
}

/** Every local $ref of `root` with the subschema it names. */
export function localRefs(root: SchemaNode): Map<string, SchemaNode> {
  const refs = new Map<string, SchemaNode>();
  forEachSubschema(root, (node) => {
    if (!isRecord(node) || typeof node.$ref !== 'string' || refs.has(node.$ref)) return;
    const target = resolveLocalRef(root, node.$ref);
    if (target !== undefined) refs.set(node.$ref, target);
  });
  return refs;
}

/** The first $ref cycle that describes no value (a $ref reached again without entering a part of the value). */
export function refLoopIssue(root: SchemaNode, refs: Map<string, SchemaNode>): SchemaIssue | undefined {
  const edges = new Map<string, { ref: string; at: Loc }[]>();
  for (const [key, target] of [['#', root] as const, ...refs]) {
    const out: { ref: string; at: Loc }[] = [];
    const stack: { node: SchemaNode; at: Loc }[] = [{ node: target, at: locOfRef(key) }];
    while (stack.length > 0) {
      const { node, at } = stack.pop()!;
      if (isRecord(node) && typeof node.$ref === 'string' && refs.has(node.$ref))
        out.push({ ref: node.$ref, at: [...at, '$ref'] });
      for (const c of childrenOf(node, at)) if (!c.part) stack.push(c);
    }
    edges.set(key, out);
  }
  const state = new Map<string, 'open' | 'done'>();
  for (const start of edges.keys()) {
    if (state.has(start)) continue;
    const path: { key: string; next: number }[] = [{ key: start, next: 0 }];
    state.set(start, 'open');
    while (path.length > 0) {
      const top = path[path.length - 1]!;
      const edge = edges.get(top.key)![top.next++];
      if (!edge) {
        state.set(top.key, 'done');
        path.pop();
        continue;
      }
      const seen = state.get(edge.ref);
      if (seen === 'open') {
        const loop = [...path.slice(path.findIndex((p) => p.key === edge.ref)).map((p) => p.key), edge.ref];
        return {
          at: edge.at,
          msg: `The $ref '${edge.ref}' refers back to itself without describing any value (${loop.join(' → ')})`,
        };
      }
      if (seen === undefined) {
        state.set(edge.ref, 'open');
        path.push({ key: edge.ref, next: 0 });
      }
    }
  }
  return undefined;
}

/**
 * Why no answer can match `root`, or why none is short enough for the service to write, or
 * undefined. The schema is within the limits already (its depth in particular), and has no $ref
 * loop (refLoopIssue); `refs` are its local $refs (localRefs).
 */
export function answerIssue(root: SchemaNode, refs: Map<string, SchemaNode>): SchemaIssue | undefined {
  // Which $refs have a finite value: a fixed point, reached with a worklist (a $ref is looked at
  // again only when one it mentions is found to have one), so a long chain costs no more rounds.
  const productive = new Set<string>();
  const whys = new Map<string, Why | undefined>();
  const answers = new Answers({ productive: (r) => !refs.has(r) || productive.has(r), why: (r) => whys.get(r) });
  const mentionedBy = new Map<string, string[]>();
  for (const [ref, target] of refs)
    forEachSubschema(target, (node) => {
      if (!isRecord(node) || typeof node.$ref !== 'string') return;
      const list = mentionedBy.get(node.$ref) ?? [];
      if (list[list.length - 1] !== ref) list.push(ref);
      mentionedBy.set(node.$ref, list);
    });
  const work = [...refs.keys()];
  while (work.length > 0) {
    const ref = work.pop()!;
    if (productive.has(ref) || !Number.isFinite(answers.shortest(refs.get(ref)!, locOfRef(ref)).chars)) continue;
    productive.add(ref);
    for (const other of mentionedBy.get(ref) ?? []) if (!productive.has(other)) work.push(other);
  }
  // Twice, so a $ref to a $ref with a contradiction inside reports the contradiction.
  for (let pass = 0; pass < 2; pass++)
    for (const [ref, target] of refs)
      if (!productive.has(ref)) whys.set(ref, answers.shortest(target, locOfRef(ref)).why);
  const top = answers.shortest(root, []);
  if (!Number.isFinite(top.chars)) return { at: top.why!.at, msg: top.why!.msg };
  if (top.chars > SCHEMA_LIMITS.answerChars)
    return {
      at: [],
      msg: `Every answer this schema allows is at least ${formatCount(top.chars)} characters long; an answer is at most ${formatCount(MAX_ANSWER_TOKENS)} tokens, which the service counts as ${formatCount(SCHEMA_LIMITS.answerChars)} characters`,
    };
  return undefined;
}
