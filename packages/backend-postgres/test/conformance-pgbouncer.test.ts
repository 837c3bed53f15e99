// The whole shared suite in lease mode through PgBouncer pooling by transaction, the way most
// deployments put a pooler in front of PostgreSQL: each transaction may run on another server
// session, so nothing may live in a session (the backend sends its statements unnamed there, and
// waiters wake by their re-checks when a release's notification went to another session).
// Session mode through a transaction pooler is refused (pgbouncer.test.ts); through session
// pooling it runs in the cluster fault runs (test/cluster-faults.test.ts). About 250 s.
import { defineConformanceSuite, matrixUrl } from '@deadbolt/conformance';
import { postgresSuiteOptions } from './harness.js';

defineConformanceSuite(postgresSuiteOptions('lease', matrixUrl('pgbouncer')));
