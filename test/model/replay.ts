/** Runs one program on a target named as `makeTarget` names it (`redis`, `mysql -> zookeeper`), in namespaces of its own. */
import { randomBytes } from 'node:crypto';
import type { StoreKind } from '../namespaces.js';
import { runProgram, type Program } from './program.js';
import { makeTarget } from './targets.js';

export async function replay(target: string, program: Program): Promise<void> {
  const [from, to] = target.split(' -> ') as [StoreKind, StoreKind | undefined];
  const made = await makeTarget(from, to);
  try {
    await runProgram(made, program, `model/${randomBytes(6).toString('hex')}`);
  } finally {
    await made.purge();
  }
}
