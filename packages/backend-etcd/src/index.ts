export { EtcdBackend, etcdBackend, type EtcdBackendOptions } from './etcd-backend.js';
