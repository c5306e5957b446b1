from xtrain_acme_cluster.environment import AcmeEnvironment

from xtrain.core.testing import ClusterEnvironmentConformance


class TestAcmeEnvironment(ClusterEnvironmentConformance):
    environment = AcmeEnvironment

    def rank_variables(self, *, rank: int, world_size: int, port: int) -> dict[str, str]:
        return {"ACME_RANK": str(rank), "ACME_LOCAL_RANK": str(rank), "ACME_NODE_RANK": "0",
                "ACME_WORLD_SIZE": str(world_size), "ACME_COORDINATOR": f"127.0.0.1:{port}"}
