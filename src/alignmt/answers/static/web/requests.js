/* A request checked against its route's JSON Schema, as the server checks it: the schemas are
   the server's own (alignmt.answers.schemas, pydantic's `model_json_schema`, written into each
   exported site's site.json), and a problem reads as the server's 422 says it, "field:
   message" in pydantic's words, the first problem in the order pydantic finds them (the
   fields in their order, each missing or wrong, then keys the route does not take). What a
   schema cannot say (a sentence's characters, tokens a vocabulary lacks) the worker checks
   itself. tests/test_web.py holds both sides to the same messages. */

/** The first problem of `body` under `schema`, as "field: message"; null where there is none. */
export function problem(schema, body) {
  const found = [];
  check(schema, schema, body, [], found);
  if (!found.length) return null;
  const [path, message] = found[0];
  return `${where(path) || "body"}: ${message}`;
}

/** The field's name as the server writes it: `sentences[2]`, `sample.top_p`. */
const where = (path) => path.map((part) => (typeof part === "number" ? `[${part}]` : `.${part}`))
  .join("").replace(/^\./, "");

function check(root, schema, value, path, found) {
  if (found.length) return;
  if (schema.$ref) schema = root.$defs[schema.$ref.split("/").at(-1)];
  if (schema.anyOf) { // X or null, as pydantic writes an optional field
    if (value === null && schema.anyOf.some((s) => s.type === "null")) return;
    check(root, schema.anyOf.find((s) => s.type !== "null"), value, path, found);
    return;
  }
  if (schema.enum) { // a choice, which pydantic checks before the type
    if (!schema.enum.includes(value)) found.push([path, choices(schema.enum)]);
    return;
  }
  const wrong = wrongType(schema, value);
  if (wrong) { found.push([path, wrong]); return; }
  const bound = outOfBounds(schema, value);
  if (bound) { found.push([path, bound]); return; }
  if (schema.type === "array") {
    value.forEach((item, i) => check(root, schema.items, item, [...path, i], found));
  } else if (schema.type === "object") {
    checkObject(root, schema, value, path, found);
  }
}

function checkObject(root, schema, value, path, found) {
  const properties = schema.properties ?? {};
  for (const [name, field] of Object.entries(properties)) {
    if (!(name in value)) {
      if ((schema.required ?? []).includes(name)) found.push([[...path, name], "Field required"]);
    } else {
      check(root, field, value[name], [...path, name], found);
    }
  }
  for (const [key, item] of Object.entries(value)) {
    if (key in properties) continue;
    if (schema.additionalProperties === false) {
      found.push([[...path, key], "Extra inputs are not permitted"]);
    } else if (schema.additionalProperties) { // a dict: keys of digits are numbers, as steps are
      const part = /^[0-9]+$/.test(key) ? Number(key) : key;
      check(root, schema.additionalProperties, item, [...path, part], found);
    }
  }
}

const TYPES = {
  integer: [(v) => typeof v === "number" && Number.isInteger(v), "a valid integer"],
  number: [(v) => typeof v === "number", "a valid number"],
  string: [(v) => typeof v === "string", "a valid string"],
  boolean: [(v) => typeof v === "boolean", "a valid boolean"],
  array: [(v) => Array.isArray(v), "a valid list"],
  object: [(v) => v !== null && typeof v === "object" && !Array.isArray(v), "a valid dictionary"],
};

function wrongType(schema, value) {
  if (!schema.type) return null;
  const [fits, name] = TYPES[schema.type];
  if (fits(value)) return null;
  // a nested model (a schema of its own, with a title) is "a dictionary or instance of" it
  const model = schema.type === "object" && schema.properties ? " or object to extract fields from" : "";
  return `Input should be ${name}${model}`;
}

function choices(values) {
  const names = values.map((v) => `'${v}'`);
  return `Input should be ${names.slice(0, -1).join(", ")} or ${names.at(-1)}`;
}

const plural = (n, word) => `${n} ${word}${n === 1 ? "" : "s"}`;

function outOfBounds(schema, value) {
  if (schema.minimum !== undefined && value < schema.minimum) {
    return `Input should be greater than or equal to ${schema.minimum}`;
  }
  if (schema.exclusiveMinimum !== undefined && value <= schema.exclusiveMinimum) {
    return `Input should be greater than ${schema.exclusiveMinimum}`;
  }
  if (schema.maximum !== undefined && value > schema.maximum) {
    return `Input should be less than or equal to ${schema.maximum}`;
  }
  if (schema.minItems !== undefined && value.length < schema.minItems) {
    return `List should have at least ${plural(schema.minItems, "item")} after validation, not ${value.length}`;
  }
  if (schema.maxItems !== undefined && value.length > schema.maxItems) {
    return `List should have at most ${plural(schema.maxItems, "item")} after validation, not ${value.length}`;
  }
  return null;
}
