export { ZooKeeperBackend, zookeeperBackend, type ZooKeeperBackendOptions, type ZooKeeperSession } from './zookeeper-backend.js';
