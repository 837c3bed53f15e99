/** @module @deadbolt/zookeeper */
export {
  ZooKeeperBackend,
  zookeeperBackend,
  type ZooKeeperBackendOptions,
  type ZooKeeperSession,
  zookeeperOptionRules,
} from './zookeeper-backend.js';
export { ZooKeeperFence, zookeeperFence, zookeeperFenceOptionRules, type ZooKeeperFenceOptions } from './fence.js';
