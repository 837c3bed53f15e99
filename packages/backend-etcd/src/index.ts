export { EtcdBackend, etcdBackend, type EtcdBackendOptions, etcdOptionRules } from './etcd-backend.js';
