import { keys } from '../redis/keys';
import type { RedisClient } from '../redis/redis';
import { budgetMonth, spendExpiry } from './budget-month';

/** An organization's and a key's monthly token budgets; null: none. */
export interface MonthlyBudgets {
  org: number | null;
  key: number | null;
}

/**
 * Which budgets count a task's tokens, as its state hash carries it from the api (which knows the
 * budgets) to the task's ending (which knows the tokens): `o` its org's, `k` its key's, `ok` both.
 */
export type BudgetScope = 'o' | 'k' | 'ok';

/** The scope of a request's budgets, or null when neither has one (then nothing is counted). */
export function budgetScope(budgets: MonthlyBudgets): BudgetScope | null {
  const org = budgets.org !== null;
  const key = budgets.key !== null;
  return org && key ? 'ok' : org ? 'o' : key ? 'k' : null;
}

/** The tokens of one ended task, for the budgets in its scope. */
export interface Spend {
  orgId: string;
  apiKeyId: string | null;
  scope: string;
  tokens: number;
  /** When the task ended (epoch ms): the month it counts in. */
  at: number;
}

/** Tokens used this month by an org and by a key, as the counters say. */
export interface MonthSpend {
  org: number;
  key: number;
}

/**
 * Sets a counter to a total when the total is higher (the counter may have missed endings: a Redis that
 * restarted without its data, a dispatcher that died between a task's ending and its count), and gives
 * it its expiry. Never lowers it: endings counted here and not yet written to Postgres stay counted.
 */
const RAISE = `
local current = tonumber(redis.call('GET', KEYS[1]) or '0')
if tonumber(ARGV[1]) > current then
  redis.call('SET', KEYS[1], ARGV[1], 'PXAT', ARGV[2])
  return 1
end
return 0`;

/**
 * Adds a task's tokens to each counter it is passed (an org's, a key's, or both: one slot, see
 * keys.orgTokensSpent) and gives a counter its expiry when this add created it: one command a task.
 */
const ADD = `
for i = 1, #KEYS do
  if redis.call('INCRBY', KEYS[i], ARGV[1]) == tonumber(ARGV[1]) then
    redis.call('PEXPIREAT', KEYS[i], ARGV[2])
  end
end
return 1`;

interface SpendCommands {
  syRaiseSpend(key: string, total: number, expiresAt: number): Promise<number>;
  syAddSpend(keyCount: number, ...keysAndArgs: (string | number)[]): Promise<number>;
}

/**
 * The monthly spend counters of budgets (keys.orgTokensSpent, keys.keyTokensSpent): one Redis string
 * per budget and month, added to as tasks end (one script) and read by the api before it takes a
 * request (one MGET); an org's and its keys' share a slot on a cluster. Only
 * orgs and keys with a budget are counted; the reconciler (BudgetReconciler) raises a counter to what
 * Postgres counted, for a budget set during the month and for endings a counter missed.
 */
export class SpendCounter {
  private readonly redis: RedisClient & SpendCommands;

  constructor(redis: RedisClient) {
    redis.defineCommand('syRaiseSpend', { numberOfKeys: 1, lua: RAISE });
    // Its number of keys varies (one or two counters): given with each call.
    redis.defineCommand('syAddSpend', { lua: ADD });
    this.redis = redis as RedisClient & SpendCommands;
  }

  /** Adds an ended task's tokens to the counters of its scope, in one command. */
  async add(spend: Spend): Promise<void> {
    if (spend.tokens <= 0) {
      return;
    }
    const month = budgetMonth(spend.at);
    const counters: string[] = [];
    if (spend.scope.includes('o')) {
      counters.push(keys.orgTokensSpent(spend.orgId, month));
    }
    if (spend.scope.includes('k') && spend.apiKeyId) {
      counters.push(keys.keyTokensSpent(spend.orgId, spend.apiKeyId, month));
    }
    if (counters.length > 0) {
      await this.redis.syAddSpend(counters.length, ...counters, spend.tokens, spendExpiry(spend.at).getTime());
    }
  }

  /** The tokens the org and the key used in the month of `at` (0 where a counter is absent): one MGET. */
  async used(orgId: string, apiKeyId: string, at: number): Promise<MonthSpend> {
    const month = budgetMonth(at);
    const [org, key] = await this.redis.mget(
      keys.orgTokensSpent(orgId, month),
      keys.keyTokensSpent(orgId, apiKeyId, month),
    );
    return { org: Number(org ?? 0), key: Number(key ?? 0) };
  }

  /** Raises the org's counter for the month of `at` to `total`, if it is lower. */
  raiseOrg(orgId: string, at: number, total: number): Promise<number> {
    return this.redis.syRaiseSpend(keys.orgTokensSpent(orgId, budgetMonth(at)), total, spendExpiry(at).getTime());
  }

  /** Raises the key's counter for the month of `at` to `total`, if it is lower. */
  raiseKey(orgId: string, apiKeyId: string, at: number, total: number): Promise<number> {
    return this.redis.syRaiseSpend(
      keys.keyTokensSpent(orgId, apiKeyId, budgetMonth(at)),
      total,
      spendExpiry(at).getTime(),
    );
  }
}
