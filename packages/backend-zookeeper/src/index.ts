export {
  ZooKeeperBackend,
  zookeeperBackend,
  type ZooKeeperBackendOptions,
  type ZooKeeperSession,
  zookeeperOptionRules,
} from './zookeeper-backend.js';
