use shedlock_macros::scheduler_lock;

#[scheduler_lock(name = "import", lock_at_most_for = "1m", keep_alive = true)]
async fn import(executor: &shedlock::LockingTaskExecutor) {}

fn main() {}
