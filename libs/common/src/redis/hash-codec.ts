/** How a field's value is written in the hash, as the docs name it. */
export type HashFieldKind = 'text' | 'integer' | 'flag' | 'epoch ms' | 'JSON list';

/**
 * One field of a Redis hash: its name in the hash, how a value is written there and read back, and
 * what it holds (for the docs). An optional field reads as null when it is missing or empty.
 */
export interface HashField<T> {
  /** The field's name in the hash. */
  readonly name: string;
  readonly kind: HashFieldKind;
  /** What it holds, as the docs say it. */
  readonly holds: string;
  encode(value: T): string;
  decode(raw: string | undefined): T;
}

/** A hash's fields, by the name the code uses for each. */
export type HashFields = Record<string, HashField<unknown>>;

/** The values of a hash's fields, by the code's names. */
export type HashValues<F> = { [K in keyof F]: F[K] extends HashField<infer T> ? T : never };

/** A field of the docs' field lists. */
export interface HashFieldDoc {
  field: string;
  kind: HashFieldKind;
  holds: string;
}

const orNull = (raw: string | undefined) => (raw === undefined || raw === '' ? null : raw);

/** The kinds of field a hash holds. */
export const hashField = {
  text: <T extends string = string>(name: string, holds: string): HashField<T> => ({
    name,
    kind: 'text',
    holds,
    encode: (value) => value,
    decode: (raw) => (raw ?? '') as T,
  }),
  /**
   * Text that reads as `fallback` when it is missing or empty: a field added to a hash that some
   * hashes written before it lack (they keep the value they had in effect).
   */
  textOr: <T extends string>(name: string, holds: string, fallback: T): HashField<T> => ({
    name,
    kind: 'text',
    holds,
    encode: (value) => value,
    decode: (raw) => (raw === undefined || raw === '' ? fallback : (raw as T)),
  }),
  optionalText: <T extends string = string>(name: string, holds: string): HashField<T | null> => ({
    name,
    kind: 'text',
    holds,
    encode: (value) => value ?? '',
    decode: (raw) => orNull(raw) as T | null,
  }),
  integer: (name: string, holds: string): HashField<number> => ({
    name,
    kind: 'integer',
    holds,
    encode: String,
    decode: Number,
  }),
  optionalInteger: (name: string, holds: string): HashField<number | null> => ({
    name,
    kind: 'integer',
    holds,
    encode: (value) => (value === null ? '' : String(value)),
    decode: (raw) => (orNull(raw) === null ? null : Number(raw)),
  }),
  /** A boolean as `1` or `0`. */
  flag: (name: string, holds: string): HashField<boolean> => ({
    name,
    kind: 'flag',
    holds,
    encode: (value) => (value ? '1' : '0'),
    decode: (raw) => raw === '1',
  }),
  /** A time as epoch milliseconds. */
  time: (name: string, holds: string): HashField<Date> => ({
    name,
    kind: 'epoch ms',
    holds,
    encode: (value) => String(value.getTime()),
    decode: (raw) => new Date(Number(raw)),
  }),
  optionalTime: (name: string, holds: string): HashField<Date | null> => ({
    name,
    kind: 'epoch ms',
    holds,
    encode: (value) => (value === null ? '' : String(value.getTime())),
    decode: (raw) => (orNull(raw) === null ? null : new Date(Number(raw))),
  }),
  /** A list of strings as JSON; anything else reads as an empty list. */
  list: (name: string, holds: string): HashField<string[]> => ({
    name,
    kind: 'JSON list',
    holds,
    encode: (value) => JSON.stringify(value),
    decode: (raw) => {
      try {
        const parsed = JSON.parse(raw ?? '[]') as unknown;
        return Array.isArray(parsed) ? parsed.map(String) : [];
      } catch {
        return [];
      }
    },
  }),
};

/**
 * How the values of one Redis hash are written and read, by every reader and writer of it (Lua
 * scripts take the field names from `names`, by template): the field names are spelled once, here.
 */
export class HashCodec<F extends HashFields> {
  /** Each field's name in the hash, by the code's name for it. */
  readonly names: { readonly [K in keyof F]: string };

  constructor(readonly fields: F) {
    const names = Object.values(fields).map((f) => f.name);
    const twice = names.find((name, i) => names.indexOf(name) !== i);
    if (twice !== undefined) {
      throw new Error(`hash field '${twice}' is defined twice`);
    }
    this.names = Object.fromEntries(Object.entries(fields).map(([key, f]) => [key, f.name])) as {
      [K in keyof F]: string;
    };
  }

  /** The values given (an undefined one is left out) as field/value pairs, in HSET's order. */
  pairs(values: Partial<HashValues<F>>): string[] {
    const pairs: string[] = [];
    for (const [key, value] of Object.entries(values)) {
      if (value !== undefined) {
        const field = this.fields[key];
        pairs.push(field.name, field.encode(value));
      }
    }
    return pairs;
  }

  /** The values given (an undefined one is left out) as a field → value object, HSET's other form. */
  encode(values: Partial<HashValues<F>>): Record<string, string> {
    const pairs = this.pairs(values);
    const hash: Record<string, string> = {};
    for (let i = 0; i < pairs.length; i += 2) {
      hash[pairs[i]] = pairs[i + 1];
    }
    return hash;
  }

  /** Every field of a hash as HGETALL returns it (missing fields read as their kind's empty value). */
  decode(hash: Record<string, string>): HashValues<F> {
    const values: Record<string, unknown> = {};
    for (const key in this.fields) {
      const field = this.fields[key];
      values[key] = field.decode(hash[field.name]);
    }
    return values as HashValues<F>;
  }

  /** The fields, in order, for the docs. */
  describe(): HashFieldDoc[] {
    return Object.values(this.fields).map((f) => ({ field: f.name, kind: f.kind, holds: f.holds }));
  }
}
