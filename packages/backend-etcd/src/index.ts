/** @module @deadbolt/etcd */
export { EtcdBackend, etcdBackend, type EtcdBackendOptions, etcdOptionRules } from './etcd-backend.js';
export { EtcdFence, etcdFence, etcdFenceOptionRules, type EtcdFenceOptions } from './fence.js';
