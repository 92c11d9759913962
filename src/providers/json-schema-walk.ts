// The subschemas of a client's JSON Schema, visited without recursion (a schema may be wide:
// thousands of properties), and its local $refs resolved.

export type Loc = (string | number)[];
export type SchemaNode = Record<string, unknown> | boolean;

/** Keywords holding one subschema; `instance: true` when it applies to a part of the value, not the value itself. */
const ONE: Record<string, boolean> = {
  not: false,
  if: false,
  then: false,
  else: false,
  additionalProperties: true,
  contains: true,
  propertyNames: true,
  additionalItems: true,
  unevaluatedItems: true,
  unevaluatedProperties: true,
  contentSchema: true,
  items: true,
};
/** Keywords holding a list of subschemas. */
const LIST: Record<string, boolean> = { allOf: false, anyOf: false, oneOf: false, prefixItems: true, items: true };
/** Keywords holding subschemas by name. */
const MAP: Record<string, boolean> = {
  properties: true,
  patternProperties: true,
  $defs: true,
  definitions: true,
  dependentSchemas: false,
  dependencies: false,
};

const isSchema = (v: unknown): v is SchemaNode =>
  typeof v === 'boolean' || (v !== null && typeof v === 'object' && !Array.isArray(v));

/** The direct subschemas of `node`, with where they are and whether they describe a part of the value. */
export function childrenOf(node: SchemaNode, at: Loc): { node: SchemaNode; at: Loc; part: boolean }[] {
  if (typeof node === 'boolean') return [];
  const out: { node: SchemaNode; at: Loc; part: boolean }[] = [];
  for (const [k, v] of Object.entries(node)) {
    if (k in ONE && isSchema(v)) out.push({ node: v, at: [...at, k], part: ONE[k]! });
    else if (k in LIST && Array.isArray(v))
      v.forEach((s, i) => {
        if (isSchema(s)) out.push({ node: s, at: [...at, k, i], part: LIST[k]! });
      });
    else if (k in MAP && v !== null && typeof v === 'object' && !Array.isArray(v))
      for (const [name, s] of Object.entries(v))
        if (isSchema(s)) out.push({ node: s, at: [...at, k, name], part: MAP[k]! });
  }
  return out;
}

/** Every subschema of `root` (root first), iteratively. */
export function forEachSubschema(root: SchemaNode, visit: (node: SchemaNode, at: Loc) => void): void {
  const stack: { node: SchemaNode; at: Loc }[] = [{ node: root, at: [] }];
  while (stack.length > 0) {
    const { node, at } = stack.pop()!;
    visit(node, at);
    const children = childrenOf(node, at);
    for (let i = children.length - 1; i >= 0; i--) stack.push(children[i]!);
  }
}

/** The subschema a local $ref ("#", "#/$defs/x") names, or undefined for any other reference. */
export function resolveLocalRef(root: SchemaNode, ref: string): SchemaNode | undefined {
  if (ref === '#') return root;
  if (!ref.startsWith('#/')) return undefined;
  let node: unknown = root;
  for (const raw of ref.slice(2).split('/')) {
    let key: string;
    try {
      key = decodeURIComponent(raw).replace(/~1/g, '/').replace(/~0/g, '~');
    } catch {
      return undefined;
    }
    if (node === null || typeof node !== 'object' || !Object.hasOwn(node, key)) return undefined;
    node = (node as Record<string, unknown>)[key];
  }
  return isSchema(node) ? node : undefined;
}
